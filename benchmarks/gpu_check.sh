#!/usr/bin/env bash
# What only a GPU can check, in one run: the prepared script for a machine with
# a CUDA GPU (CI has none; the CUDA tests skip there), under 13 minutes. From the repository root:
#
#     bash benchmarks/gpu_check.sh [OUT]       # logs and the self-check's JSON go to OUT (gpu_check/)
#
# It needs torch with CUDA, Triton, numpy, pytest and hypothesis; not Paddle (its GPU build is not
# what the tests compare with: the GPU formulas are emulated exactly on the CPU). In order:
# 1. the compiled CPU kernels, built in place (the CUDA tests compare with CPU runs);
# 2. the self-check on CUDA: every optimizer's GPU form against its emulation, host syncs per step,
#    a captured training step replayed through overflows, a second GPU when there is one;
# 3. the CUDA tests: the Triton kernels compiled for this GPU against the per-tensor formulas, CUDA
#    graphs (replays following a scheduler), streams, no host sync in fused steps;
# 4. the step's cost: a scheduler stepped every step against a constant rate and torch's foreach
#    AdamW (host-bound sizes), and the optimizers against torch's fused ones (device-bound sizes).
# Each part has its own time limit and the script goes on after a failure; its exit status is the
# number of parts that failed.
set -uo pipefail
out=${1:-gpu_check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
failed=0
part() {  # part NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "=== $name"
    timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: exit $rc"
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
}
python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))'
part build 120 python3 setup.py -q build_ext --inplace
part selfcheck 150 python3 -m paddle_compat.selfcheck --device cuda --json "$out/selfcheck.json"
part cuda_tests 240 python3 -m pytest -q -p no:cacheprovider -m cuda -rs tests
part scheduled_lr 60 python3 benchmarks/bench_scheduled_lr.py --device cuda --rounds 11
part optimizers 180 python3 benchmarks/bench_optimizers.py --device cuda --no-paddle --only all --sizes 1M,100M --rounds 3
exit "$failed"
