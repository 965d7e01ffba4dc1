"""Paddle's host-dependent CPU bits: every profile of ``paddle_compat._paddle_cpu`` against its record.

``paddle_compat/paddle331_cpu_goldens.json`` (written by ``tests/golden/record_paddle_cpu.py``) holds
digests of what Paddle 3.3.1 computed for 41 optimizer cases, per profile. Every host checks every
profile by forcing it, so an AVX-512 machine checks the AVX2 bits and an AVX2 machine the AVX-512
ones. The live comparison with the Paddle installed on the host is in tests/parity.
"""

from __future__ import annotations

import platform
import warnings

import numpy as np
import pytest
import torch

from paddle_compat import _native, _paddle_cpu, _recorded, native_status
from paddle_compat.optimizer import Adam

from .test_optimizer_kernels import keep_hardware_rsqrt, use_native

RECORD = _recorded.record()["profiles"]
CASES = [(profile, case) for profile in sorted(RECORD) for case in _recorded.names()]


def test_the_record_holds_every_case_of_both_profiles() -> None:
    assert sorted(RECORD) == sorted(_paddle_cpu.PROFILES) == ["avx2", "avx512f"]
    assert "real Paddle 3.3.1" in RECORD["avx2"]["source"]
    for entry in RECORD.values():
        assert sorted(entry["cases"]) == sorted(_recorded.names())
        assert all(len(steps) == _recorded.STEPS for steps in entry["cases"].values())
    # the profiles differ where Paddle's kernels do: float32 Adam and AdamW, nowhere else
    differ = sorted(c for c in _recorded.names() if RECORD["avx2"]["cases"][c] != RECORD["avx512f"]["cases"][c])
    assert differ == sorted(["Adam/float32", "Adam_l2_eps/float32", "Adam_amsgrad/float32", "AdamW/float32",
                             "AdamW_clip_global/float32"])


@pytest.mark.parametrize("kernels", ["compiled", "torch forms"])
@pytest.mark.parametrize(("profile", "case"), CASES, ids=[f"{p}-{c}" for p, c in CASES])
def test_each_profile_gives_its_recorded_bits(profile, case, kernels, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_paddle_cpu.ENV, profile)
    if kernels == "compiled":
        if _native.kernels() is None:
            pytest.skip("the compiled kernels are off (not built: pip install -e . builds them)")
        use_native(monkeypatch, True)
    else:
        # Eigen's float32 sqrt (RMSProp, Adagrad, Adadelta, NAdam) starts from the CPU's rsqrt,
        # which only the compiled kernels reach: the torch forms borrow it here
        keep_hardware_rsqrt(monkeypatch)
        use_native(monkeypatch, False)
    want = RECORD[profile]["cases"][case]
    got = _recorded.digests(case)
    for step, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"{case} differs from Paddle's {profile} bits at step {step} (parameters {g} vs {w})"


def test_inputs_are_the_recorders() -> None:
    """The inputs are regenerated from NumPy's seeded generator, not stored: pin them."""
    inits, grads = _recorded.inputs("Adam", "float32")
    assert [a.shape for a in inits] == [(4097,), (33, 17)] and len(grads) == _recorded.STEPS
    assert inits[0].dtype == grads[3][1].dtype == np.float32
    assert inits[0][:3].tolist() == [2.300044298171997, 0.022583890706300735, 0.14735744893550873]
    assert (_recorded.digest(inits[0]), _recorded.digest(grads[3][1])) == ("1154cdd5e6f0dd84", "b7de4045f0bb2079")


# --- which profile runs ----------------------------------------------------------------------------------
@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch):
    """Pretend to be another host: ``host(machine, flags)``."""
    monkeypatch.delenv(_paddle_cpu.ENV, raising=False)
    monkeypatch.delenv("PADDLE_COMPAT_CPU_FMA", raising=False)

    def pretend(machine: str, flags: set[str] | None) -> None:
        monkeypatch.setattr(platform, "machine", lambda: machine)
        monkeypatch.setattr(_paddle_cpu, "_cpu_flags", lambda: flags)
        monkeypatch.setattr(_paddle_cpu, "_warned", False)
        _paddle_cpu.detected.cache_clear()

    yield pretend
    _paddle_cpu.detected.cache_clear()


def test_the_profile_follows_the_avx512f_flag(host) -> None:
    host("x86_64", {"avx", "avx2", "fma", "avx512f", "avx512bw"})
    assert _paddle_cpu.detected() == ("avx512f", True)
    assert _paddle_cpu.profile() == "avx512f"
    host("x86_64", {"avx", "avx2", "fma"})
    assert _paddle_cpu.profile() == "avx2"
    host("x86_64", {"sse4_2"})  # no AVX2 nor FMA: the same reference kernel
    assert _paddle_cpu.profile() == "avx2"


def test_the_environment_forces_a_profile(host, monkeypatch: pytest.MonkeyPatch) -> None:
    host("x86_64", {"avx2", "fma"})
    monkeypatch.setenv(_paddle_cpu.ENV, "avx512f")
    assert _paddle_cpu.profile() == "avx512f"
    monkeypatch.setenv("PADDLE_COMPAT_CPU_FMA", "0")  # the older switch gives way to the new one
    assert _paddle_cpu.profile() == "avx512f"
    monkeypatch.delenv(_paddle_cpu.ENV)
    assert _paddle_cpu.profile() == "avx2"
    monkeypatch.setenv("PADDLE_COMPAT_CPU_FMA", "1")
    assert _paddle_cpu.profile() == "avx512f"


def test_a_profile_that_does_not_exist_is_refused_by_name(host, monkeypatch: pytest.MonkeyPatch) -> None:
    host("x86_64", {"avx2"})
    monkeypatch.setenv(_paddle_cpu.ENV, "neon")
    message = r"^PADDLE_COMPAT_PADDLE_CPU='neon' names no Paddle CPU profile: choose one of avx512f, avx2$"
    with pytest.raises(ValueError, match=message):
        Adam(0.1, parameters=[torch.nn.Parameter(torch.ones(3))])  # at construction, not at a step
    with pytest.raises(ValueError, match=message):
        _paddle_cpu.profile()


def test_a_host_never_recorded_warns_once_and_runs_the_reference_kernel(host) -> None:
    host("aarch64", {"fp", "asimd"})
    with pytest.warns(UserWarning, match=r"never recorded on a aarch64 CPU: computing the 'avx2' profile's"):
        assert _paddle_cpu.profile() == "avx2"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _paddle_cpu.profile() == "avx2"  # once per process


def test_native_status_names_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_paddle_cpu.ENV, "avx512f")
    assert native_status().paddle_cpu == "avx512f"
    assert "Paddle CPU profile avx512f" in str(native_status())
