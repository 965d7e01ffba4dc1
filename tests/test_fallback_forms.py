"""The torch fallback's fast forms (``PADDLE_COMPAT_NATIVE=0``, or no compiled kernels): Adam's
piecewise in-place update (``_numerics.chunks``) and the fast FMA emulation (``fma_into``) give
the exact bits of the compiled kernels and of the plain expressions, across piece boundaries and
on the values where a float64 sum rounded to float32 rounds twice."""

from __future__ import annotations

import math

import pytest
import torch

from paddle_compat import _numerics

from .test_optimizer_kernels import DTYPES, assert_same_run, forms, maker, needs_compiler, same_bits

pytestmark = pytest.mark.filterwarnings("ignore:Accumulating with FP16/BF16:UserWarning")


def fast_fma(a: float, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(c)
    scratch = (torch.empty(c.shape, dtype=torch.float64), torch.empty(c.shape, dtype=torch.int64))
    return _numerics.fma_into(out, a, b, c, *scratch)


def naive(a: float, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return (b.double() * a + c.double()).float()


# (a, b, c): the float64 sum is inexact and lands exactly on a float32 midpoint, so rounding it to
# float32 rounds the wrong way; the second lies in float32's subnormal range.
DOUBLE_ROUNDING = [
    (1 + 2**-23, 2**-24 * (1 - 2**-23), 1 + 2**-23),  # a*b = 2**-24 - 2**-70
    (2**-50 * (1 + 2**-23), 2**-100 * (1 - 2**-23), (2**23 - 1) * 2**-149),
    (-(1 + 2**-23), 2**-24 * (1 - 2**-23), -(1 + 2**-23)),
]


@pytest.mark.parametrize(("a", "b", "c"), DOUBLE_ROUNDING)
def test_the_fast_fma_emulation_rounds_once_where_float64_rounds_twice(a, b, c) -> None:
    for bt, ct in [(torch.tensor([b, 1.0]), torch.tensor([c, 2.0])),
                   (torch.tensor([b, 1.0, 0.0]), torch.tensor([c, 2.0, 0.0]))]:  # with an exact zero
        assert not same_bits(naive(a, bt, ct), _numerics.fma(a, bt, ct))  # the case is a real trap
        assert same_bits(fast_fma(a, bt, ct), _numerics.fma(a, bt, ct))


def test_the_fast_fma_emulation_matches_the_exact_one_on_all_kinds_of_values() -> None:
    gen = torch.Generator().manual_seed(0)
    n = 200_000
    b = torch.randn(n, generator=gen) * torch.exp2(torch.randint(-150, 120, (n,), generator=gen).float())
    c = torch.randn(n, generator=gen) * torch.exp2(torch.randint(-150, 120, (n,), generator=gen).float())
    c[::97] = 0.0
    b[5::101] = 0.0
    c[7::1009] = math.inf
    b[9::1013] = math.nan
    b[11::997] = -c[11::997]  # exact cancellation with a = 1
    for a in (1.0, -0.9, 0.999, 1e-3, -2.0**-40, 3e30):
        a = torch.tensor(a, dtype=torch.float32).item()
        assert same_bits(fast_fma(a, b, c), _numerics.fma(a, b, c)), a
    # the pieces used in place: out is b, then c
    a = torch.tensor(0.9).item()
    expected = _numerics.fma(a, b, c)
    for alias in ("b", "c"):
        bb, cc = b.clone(), c.clone()
        out = bb if alias == "b" else cc
        scratch = (torch.empty(n, dtype=torch.float64), torch.empty(n, dtype=torch.int64))
        assert same_bits(_numerics.fma_into(out, a, bb, cc, *scratch), expected), alias


def test_the_fast_fma_emulation_takes_an_empty_tensor() -> None:
    """An FSDP2 rank's shard of a small parameter can be empty: the torch forms step it too."""
    empty = torch.zeros(0, 3)
    assert fast_fma(0.5, empty, empty).shape == (0, 3)


def test_pieces_cover_the_tensors_in_memory_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr(_numerics, "CHUNK", 1 << 15)
    base = torch.arange(5 * 13109, dtype=torch.float32)  # 2 * CHUNK + 9 elements
    t = base.reshape(-1, 5).t()  # dense, not contiguous
    dense = torch.empty_like(t).copy_(t)  # the same layout
    assert dense.stride() == t.stride() == (1, 5)
    pieces = list(_numerics.chunks(t, dense))
    assert [len(p[0]) for p in pieces] == [_numerics.CHUNK, _numerics.CHUNK, 9]
    assert torch.equal(torch.cat([p[0] for p in pieces]), base)
    assert torch.equal(torch.cat([p[1] for p in pieces]), base)


PIECE = 1000  # elements per thread, for the test: several pieces without large tensors
LARGE = (2 * PIECE * torch.get_num_threads() + 3, 5, PIECE)


@needs_compiler
@pytest.mark.parametrize("profile", ["avx512f", "avx2"])
@pytest.mark.parametrize("dtypes", ["fp32", "bf16_master", "fp16_fp32_main_grad"])
@pytest.mark.parametrize("name", ["adam_l2_amsgrad", "adamw_ratio_lowmoment_amsgrad"])
def test_forms_agree_across_pieces(name, dtypes, profile, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensors of several pieces, and a tiny one: compiled, piecewise in place, plain."""
    monkeypatch.setenv("PADDLE_COMPAT_PADDLE_CPU", profile)
    monkeypatch.setattr(_numerics, "CHUNK", PIECE)
    compiled, in_place, plain = forms(monkeypatch, maker(name), DTYPES[dtypes], sizes=LARGE, steps=2,
                                      nonfinite=True)
    assert_same_run(compiled, in_place)
    assert_same_run(compiled, plain)
