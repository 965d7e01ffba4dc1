"""Launch the multi-process runs once per session; the tests read what each rank recorded.

Each launch starts real process groups (torchrun's environment variables, loopback
rendezvous), runs every scenario of ``worker.py`` it is given in the same processes, and is
killed at a deadline; every collective inside has a 30 s timeout (2 s in ``peer_hangs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from .launcher import Launch, launch

DEADLINE = 240.0  # seconds for a whole launch, start-up included, on a busy 2-core machine

GLOO_2 = [
    "ddp_needs_nothing", "explicit_group", "fsdp2", "paddle_optimizers_fsdp2", "checkpoint", "paddle_script",
    "recipe", "peer_hangs", "rank_raises",
]
GLOO_4 = ["hybrid", "dcp_reshard", "hybrid_clip", "recipe"]  # recipe: after gloo_2's
NCCL_2 = ["ddp_needs_nothing", "explicit_group", "fsdp2", "nccl_paths"]


@dataclass
class Run:
    launch: Launch
    out: Path

    def logs(self) -> str:
        return "\n".join(
            f"--- rank {r} (exit {rank.returncode}) ---\n{rank.output[-4000:]}"
            for r, rank in enumerate(self.launch.ranks)
        )

    def results(self, scenario: str) -> list[Any]:
        """What each rank recorded for ``scenario``; fails the test with the logs if one is
        missing or the scenario raised."""
        results = []
        for rank in range(len(self.launch.ranks)):
            path = self.out / f"{scenario}.{rank}.pt"
            if not path.exists():
                pytest.fail(f"rank {rank} left no result for {scenario!r}\n{self.logs()}")
            result = torch.load(path, weights_only=False)
            if isinstance(result, dict) and isinstance(result.get("error"), str) and "Traceback" in result["error"]:
                pytest.fail(f"{scenario!r} raised on rank {rank}:\n{result['error']}")
            results.append(result)
        return results


def _run(
    tmp_path_factory: pytest.TempPathFactory, name: str, device: str, init: str, scenarios: list[str], nprocs: int
) -> Run:
    out = tmp_path_factory.mktemp(name)
    args = [str(out), device, init, *scenarios]
    # CPU ranks are forked from one parent (fast start-up) where no GPU is present; CUDA ranks,
    # and every rank on a GPU machine, start afresh (gloo ranks forked there never finished: seen
    # on an H100 machine with torch 2.11).
    fork = device == "cpu" and not torch.cuda.is_available()
    return Run(launch("tests.distributed.worker", args, nprocs, DEADLINE, out, fork=fork), out)


@pytest.fixture(scope="session")
def gloo_2(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(tmp_path_factory, "gloo2", "cpu", "parallel_env", GLOO_2, 2)


@pytest.fixture(scope="session")
def gloo_4(tmp_path_factory: pytest.TempPathFactory, gloo_2: Run) -> Run:
    # after gloo_2: its recipe scenario leaves the checkpoint this launch resumes on 4 ranks
    return _run(tmp_path_factory, "gloo4", "cpu", "fleet:2,2", GLOO_4, 4)


@pytest.fixture(scope="session")
def nccl_2(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(tmp_path_factory, "nccl2", "cuda", "parallel_env", NCCL_2, 2)
