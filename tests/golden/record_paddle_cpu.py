"""Records real Paddle's CPU optimizers on this host into ``paddle_compat/paddle331_cpu_goldens.json``.

    python tests/golden/record_paddle_cpu.py            # real Paddle 3.3.1 (numpy<2.4) on this host
    python tests/golden/record_paddle_cpu.py --emulate avx512f

The first form runs every case of ``paddle_compat._recorded`` in Paddle and stores the digests
under the profile this host's Paddle computes (``_paddle_cpu.detected()``), with the host's CPU
flags. ``--emulate PROFILE`` stores what ``paddle_compat`` computes with that profile forced, and
says so in the record's ``source``: for a profile no host at hand can run (replace it with a
recording from such a host when one is available).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

from paddle_compat import _paddle_cpu, _recorded


def _flags() -> list[str]:
    flags = _paddle_cpu._cpu_flags() or set()
    return sorted(f for f in flags if f.startswith(("avx", "fma", "sse4", "f16c")))


def _paddle_case(paddle, case: str) -> list[list[str]]:
    name, dtype = case.split("/")
    inits, grads = _recorded.inputs(name, dtype)
    params = [paddle.create_parameter(list(v.shape), dtype, default_initializer=paddle.nn.initializer.Assign(v))
              for v in inits]
    opt = _recorded.build(paddle, name, params)
    digests = []
    for step in grads:
        loss = sum((p * paddle.to_tensor(g)).sum() for p, g in zip(params, step))
        loss.backward()
        opt.step()
        opt.clear_grad()
        digests.append([_recorded.digest(p.numpy()) for p in params])
    return digests


def _dump(record: dict) -> str:
    """The record as JSON with one case a line (readable diffs)."""
    lines = ["{", f' "paddle": {json.dumps(record["paddle"])},', ' "profiles": {']
    for i, (profile, entry) in enumerate(sorted(record["profiles"].items())):
        lines += [f"  {json.dumps(profile)}: {{", f'   "source": {json.dumps(entry["source"])},', '   "cases": {']
        cases = sorted(entry["cases"].items())
        last = len(cases) - 1
        lines += [f"    {json.dumps(c)}: {json.dumps(d)}" + ("," if j < last else "") for j, (c, d) in enumerate(cases)]
        lines += ["   }", "  }" + ("," if i < len(record["profiles"]) - 1 else "")]
    return "\n".join(lines + [" }", "}"]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emulate", choices=sorted(_paddle_cpu.PROFILES))
    args = parser.parse_args()
    path = _recorded._FILE
    record = json.loads(path.read_text()) if path.exists() else {"paddle": "3.3.1", "profiles": {}}
    if args.emulate:
        os.environ[_paddle_cpu.ENV] = profile = args.emulate
        cases = {c: _recorded.digests(c) for c in _recorded.names()}
        source = (f"paddle_compat's {profile} profile, emulated on a host without it (that profile matched real "
                  "Paddle live on such hosts); to be replaced by a recording with real Paddle there")
    else:
        import paddle

        assert paddle.__version__ == "3.3.1", paddle.__version__
        profile = _paddle_cpu.detected()[0]
        cases = {c: _paddle_case(paddle, c) for c in _recorded.names()}
        source = f"real Paddle {paddle.__version__} on {platform.machine()} ({', '.join(_flags())})"
    record["profiles"][profile] = {"source": source, "cases": cases}
    path.write_text(_dump(record))
    print(f"{len(cases)} cases recorded for profile {profile} -> {path.name}", file=sys.stderr)


if __name__ == "__main__":
    main()
