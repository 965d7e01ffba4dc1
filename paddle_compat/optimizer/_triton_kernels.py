"""Paddle's GPU update formulas as Triton kernels: every tensor of a (device, dtype) group in one launch.

Loaded by ``_multi_tensor`` (never imported directly: it needs Triton), once per Triton mode, so
that tests can run the kernels in Triton's interpreter on CPU tensors.

The tensors are described by the rows of ``_native.Batch`` (element count, data pointers, packed
dtypes), uploaded as an int64 table with each pointer as a byte offset from ``base`` (a small
device tensor; the gradients' offsets in a table of their own, rewritten alone when new gradient
tensors arrive), with a float32 table of per-tensor numbers and a table of blocks: program ``i``
updates ``BLOCK`` elements of one tensor. Offsets from a real tensor argument, rather than bare
addresses, let Triton know the alignment: with ``ALIGNED`` (every tensor 16-byte aligned, every
size a multiple of 4, checked by the caller) the loads and stores are vectorised. The formulas are those of the
per-tensor GPU forms (``_kernel`` with ``_devices.gpu_kernels``): float32 arithmetic, ``tl.fma``
where nvcc contracts Paddle's kernels, IEEE division and square root (``div_rn``, ``sqrt_rn``);
the launches pass ``enable_fp_fusion=False`` so that nothing else is contracted. bfloat16 values are
handled as their bits: widened exactly, narrowed to nearest even here (NaN as torch's CUDA cast).
A GradScaler's ``found_inf`` flag is read on the device: where it is set every load and store is
masked off, so the step changes nothing.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .. import _native

# dtype codes of _native.DTYPE, and the row and per-tensor layouts of _native.Batch (declared there)
F32: tl.constexpr = tl.constexpr(_native.DT_F32)
F64: tl.constexpr = tl.constexpr(_native.DT_F64)
BF16: tl.constexpr = tl.constexpr(_native.DT_BF16)
F16: tl.constexpr = tl.constexpr(_native.DT_F16)
NONE: tl.constexpr = tl.constexpr(_native.DT_NONE)
ROW: tl.constexpr = tl.constexpr(_native.ROW)
PER: tl.constexpr = tl.constexpr(_native.PER)
S_N: tl.constexpr = tl.constexpr(_native.S_N)
S_W: tl.constexpr = tl.constexpr(_native.S_W)
S_P: tl.constexpr = tl.constexpr(_native.S_P)
S_S1: tl.constexpr = tl.constexpr(_native.S_S1)
S_S2: tl.constexpr = tl.constexpr(_native.S_S2)
S_S3: tl.constexpr = tl.constexpr(_native.S_S3)
S_POW1: tl.constexpr = tl.constexpr(_native.S_POW1)
S_POW2: tl.constexpr = tl.constexpr(_native.S_POW2)
P_LR: tl.constexpr = tl.constexpr(_native.P_LR)
P_DECAY: tl.constexpr = tl.constexpr(_native.P_DECAY)
P_L2: tl.constexpr = tl.constexpr(_native.P_L2)


@triton.jit
def _ptr(base, row, slot, DT: tl.constexpr, ALIGNED: tl.constexpr):
    offset = tl.load(row + slot)
    if ALIGNED:
        offset = tl.multiple_of(offset, 16)
    if DT == BF16:
        return (base + offset).to(tl.pointer_type(tl.uint16))
    elif DT == F16:
        return (base + offset).to(tl.pointer_type(tl.float16))
    else:
        return (base + offset).to(tl.pointer_type(tl.float32))


@triton.jit
def _grad_ptr(base, grads, t, DT: tl.constexpr, ALIGNED: tl.constexpr):
    """The gradient of tensor ``t``: its offset is in the launch's gradient table, not its row."""
    return _ptr(base, grads + t, 0, DT, ALIGNED)


@triton.jit
def _load(ptr, offs, mask, DT: tl.constexpr):
    if DT == BF16:
        bits = tl.load(ptr + offs, mask=mask, other=0).to(tl.uint32)
        return (bits << 16).to(tl.float32, bitcast=True)
    else:
        return tl.load(ptr + offs, mask=mask, other=0).to(tl.float32)


@triton.jit
def _store(ptr, offs, x, mask, DT: tl.constexpr):
    if DT == BF16:
        u = x.to(tl.uint32, bitcast=True)
        rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        rounded = tl.where((u & 0x7FFFFFFF) > 0x7F800000, 0x7FC0, rounded)
        tl.store(ptr + offs, rounded.to(tl.uint16), mask=mask)
    elif DT == F16:
        tl.store(ptr + offs, x.to(tl.float16), mask=mask)
    else:
        tl.store(ptr + offs, x, mask=mask)


@triton.jit
def _block(blocks, rows, found, HAS_FOUND: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
    """This program's tensor index and row, element offsets, and mask (all off on a skipped step)."""
    pid = tl.program_id(0)
    t = tl.load(blocks + 2 * pid).to(tl.int64)
    row = rows + t * ROW
    start = tl.load(blocks + 2 * pid + 1).to(tl.int64) * BLOCK
    n = tl.load(row + S_N)
    if ALIGNED:
        start = tl.multiple_of(start, BLOCK)
        n = tl.multiple_of(n, 4)
    offs = start + tl.arange(0, BLOCK)
    if ALIGNED:
        offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)
    mask = offs < n
    if HAS_FOUND:  # (the flag widened to a block first: the interpreter cannot mix the two)
        mask = mask & ((tl.load(found) + tl.full([BLOCK], 0.0, tl.float32)) == 0)
    return t, row, offs, mask


@triton.jit
def _with_l2(g, w, per, t):
    """g + w*l2 (two roundings) where the tensor's L2 coefficient is set (not NaN), else g."""
    l2 = tl.load(per + t * PER + P_L2)
    return tl.where(l2 == l2, g + w * l2, g)


@triton.jit
def _store_w(base, row, w_ptr, offs, w, mask, W: tl.constexpr, P: tl.constexpr, ALIGNED: tl.constexpr):
    """The updated value, and the low-precision parameter refreshed from it when there is one."""
    _store(w_ptr, offs, w, mask, W)
    if P != NONE:
        _store(_ptr(base, row, S_P, P, ALIGNED), offs, w, mask, P)


@triton.jit
def sgd_kernel(base, blocks, rows, grads, per, found, W: tl.constexpr, G: tl.constexpr, P: tl.constexpr,
               HAS_FOUND: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
    """w = fma(-lr, g, w); with L2 decay first g = g + w*coeff (two roundings)."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    lr = tl.load(per + t * PER + P_LR)
    w_ptr = _ptr(base, row, S_W, W, ALIGNED)
    w = _load(w_ptr, offs, mask, W)
    g = _with_l2(_load(_grad_ptr(base, grads, t, G, ALIGNED), offs, mask, G), w, per, t)
    w = tl.fma(-lr, g, w)
    _store_w(base, row, w_ptr, offs, w, mask, W, P, ALIGNED)


@triton.jit
def momentum_kernel(base, blocks, rows, grads, per, found, mu, coeff, rescale, W: tl.constexpr, G: tl.constexpr,
                    P: tl.constexpr, HAS_COEFF: tl.constexpr, NESTEROV: tl.constexpr,
                    HAS_FOUND: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
    """g = g*rescale; g = fma(coeff, w, g); v = fma(v, mu, g);
    w = fma(-lr, v, w), or with Nesterov w = fma(-fma(v, mu, g), lr, w)."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    lr = tl.load(per + t * PER + P_LR)
    w_ptr = _ptr(base, row, S_W, W, ALIGNED)
    v_ptr = _ptr(base, row, S_S1, W, ALIGNED)
    w = _load(w_ptr, offs, mask, W)
    g = _load(_grad_ptr(base, grads, t, G, ALIGNED), offs, mask, G) * rescale
    if HAS_COEFF:
        g = tl.fma(coeff, w, g)
    v = tl.fma(_load(v_ptr, offs, mask, W), mu, g)
    if NESTEROV:
        w = tl.fma(-tl.fma(v, mu, g), lr, w)
    else:
        w = tl.fma(-lr, v, w)
    _store(v_ptr, offs, v, mask, W)
    _store_w(base, row, w_ptr, offs, w, mask, W, P, ALIGNED)


@triton.jit
def adam_kernel(base, blocks, rows, grads, per, found, b1, b2, c1, c2, eps, W: tl.constexpr, G: tl.constexpr,
                P: tl.constexpr, S: tl.constexpr, AMSGRAD: tl.constexpr, HAS_FOUND: tl.constexpr,
                ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
    """Paddle's GPU Adam/AdamW: w = w*(1 - decay) (AdamW; per-tensor factor, 1 without decay);
    m = fma(b1, m, g*(1-b1)); v = fma(b2, v, (g*(1-b2))*g);
    w = fma(m / (sqrt(v)/sqrt(1-b2^t) + eps), -(lr/(1-b1^t)), w). The beta powers are read here
    and multiplied afterwards by the caller (every block of a tensor reads them first)."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    lr = tl.load(per + t * PER + P_LR)
    keep = tl.load(per + t * PER + P_DECAY)
    b1p = tl.load(_ptr(base, row, S_POW1, F32, False))
    b2p = tl.load(_ptr(base, row, S_POW2, F32, False))
    w_ptr = _ptr(base, row, S_W, W, ALIGNED)
    m_ptr = _ptr(base, row, S_S1, S, ALIGNED)
    v_ptr = _ptr(base, row, S_S2, S, ALIGNED)
    w = _load(w_ptr, offs, mask, W)
    g = _with_l2(_load(_grad_ptr(base, grads, t, G, ALIGNED), offs, mask, G), w, per, t)
    w = w * keep
    m = tl.fma(b1, _load(m_ptr, offs, mask, S), g * c1)
    v = tl.fma(b2, _load(v_ptr, offs, mask, S), (g * c2) * g)
    _store(m_ptr, offs, m, mask, S)
    _store(v_ptr, offs, v, mask, S)
    if AMSGRAD:
        vmax_ptr = _ptr(base, row, S_S3, S, ALIGNED)
        v = tl.maximum(v, _load(vmax_ptr, offs, mask, S), propagate_nan=tl.PropagateNan.ALL)
        _store(vmax_ptr, offs, v, mask, S)
    denom = tl.math.div_rn(tl.sqrt_rn(v), tl.sqrt_rn(1.0 - b2p)) + eps
    w = tl.fma(tl.math.div_rn(m, denom), -tl.math.div_rn(lr, 1.0 - b1p), w)
    _store_w(base, row, w_ptr, offs, w, mask, W, P, ALIGNED)
