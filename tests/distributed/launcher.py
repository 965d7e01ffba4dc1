"""Start N ranks the way torchrun does (its environment variables, a loopback rendezvous on a
free port), wait with a deadline, and collect what each rank left.

Process start-up dominates these tests (importing torch, and the torch._dynamo that DDP and
FSDP import, costs seconds of CPU per process). On CPU the ranks are therefore forked from one
parent that imported all of it once (``python -m tests.distributed.launcher``); it forks
before touching any tensor, thread pool or device. CUDA runs spawn a fresh interpreter per
rank, as torchrun does, since CUDA does not survive a fork.
"""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Rank:
    returncode: int | None  # None: still running at the deadline, or killed by a signal
    output: str


@dataclass
class Launch:
    ranks: list[Rank]
    seconds: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, nprocs: int, port: int) -> dict[str, str]:
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(nprocs),
        "LOCAL_WORLD_SIZE": str(nprocs),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
    }


def launch(module: str, args: list[str], nprocs: int, deadline: float, log_dir: Path, fork: bool = True) -> Launch:
    """Run ``module.main()`` with ``sys.argv[1:] == args`` as ``nprocs`` ranks; kill whatever
    still runs after ``deadline`` seconds."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.monotonic()
    if fork:
        cmd = [sys.executable, "-m", "tests.distributed.launcher", str(nprocs), str(port), str(log_dir), module, *args]
        procs = [subprocess.Popen(cmd, env=env, cwd=ROOT, start_new_session=True)]
    else:
        procs = []
        for rank in range(nprocs):
            with open(log_dir / f"rank{rank}.log", "w") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-c", f"import {module} as m; m.main()", *args],
                        env={**env, **rank_env(rank, nprocs, port)},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=ROOT,
                        start_new_session=True,
                    )
                )
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - (time.monotonic() - start), 0.1))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:  # at the deadline: the process and the ranks it forked
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    ranks = []
    for rank in range(nprocs):
        output = (log_dir / f"rank{rank}.log").read_text(errors="replace")
        if fork:
            code_file = log_dir / f"rank{rank}.exit"
            code = int(code_file.read_text()) if code_file.exists() else None
        else:
            code = procs[rank].returncode
        ranks.append(Rank(code if code is None or code >= 0 else None, output))
    return Launch(ranks, time.monotonic() - start)


def _fork_ranks(nprocs: int, port: int, log_dir: Path, module: str, args: list[str]) -> None:
    """The fork server: import once, fork each rank, record each exit status."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # a CUDA query must not init CUDA here
    import torch

    torch.set_num_threads(1)
    import torch._dynamo  # noqa: F401  (what DDP and FSDP import on first use)
    import torch.distributed.fsdp  # noqa: F401

    target = importlib.import_module(module)
    children = {}
    for rank in range(nprocs):
        pid = os.fork()
        if pid == 0:  # the rank
            code = 1
            try:
                os.environ.update(rank_env(rank, nprocs, port))
                fd = os.open(log_dir / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                sys.argv = [module, *args]
                target.main()
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[pid] = rank
    while children:
        pid, status = os.wait()
        (log_dir / f"rank{children.pop(pid)}.exit").write_text(str(os.waitstatus_to_exitcode(status)))


if __name__ == "__main__":
    _fork_ranks(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5:])
