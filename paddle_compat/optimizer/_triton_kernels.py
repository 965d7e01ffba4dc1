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
    w_ptr, w, g = _value_grad(base, row, grads, per, t, offs, mask, W, G, ALIGNED)
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
    b1p = _pow1(base, row)
    b2p = _pow2(base, row)
    m_ptr = _ptr(base, row, S_S1, S, ALIGNED)
    v_ptr = _ptr(base, row, S_S2, S, ALIGNED)
    w_ptr, w, g = _value_grad(base, row, grads, per, t, offs, mask, W, G, ALIGNED)
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


# --- the later optimizers: the per-tensor torch forms as torch computes them on CUDA, every operation
# rounded (no FMA), a division by a scalar as torch's CUDA kernel does it (times the reciprocal)
@triton.jit
def _value_grad(base, row, grads, per, t, offs, mask, W: tl.constexpr, G: tl.constexpr, ALIGNED: tl.constexpr):
    """The value's pointer, the value, and the gradient (with the row's L2 term)."""
    w_ptr = _ptr(base, row, S_W, W, ALIGNED)
    w = _load(w_ptr, offs, mask, W)
    g = _with_l2(_load(_grad_ptr(base, grads, t, G, ALIGNED), offs, mask, G), w, per, t)
    return w_ptr, w, g


@triton.jit
def _pow1(base, row):
    """The row's first one-element float32 power."""
    return tl.load(_ptr(base, row, S_POW1, F32, False))


@triton.jit
def _pow2(base, row):
    """The row's second one-element float32 power."""
    return tl.load(_ptr(base, row, S_POW2, F32, False))


@triton.jit
def rmsprop_kernel(base, blocks, rows, grads, per, found, rho, keep, eps, mu, W: tl.constexpr, G: tl.constexpr,
                   P: tl.constexpr, S: tl.constexpr, CENTERED: tl.constexpr, HAS_FOUND: tl.constexpr,
                   ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
    """ms = ms*rho + (g*keep)*g; centered: mg = mg*rho + g*keep, den = (ms - mg*mg) + eps, else
    den = ms + eps; mom = mom*mu + (g*lr)/sqrt(den); w = w - mom."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    lr = tl.load(per + t * PER + P_LR)
    w_ptr, w, g = _value_grad(base, row, grads, per, t, offs, mask, W, G, ALIGNED)
    mom_ptr = _ptr(base, row, S_S1, S, ALIGNED)
    ms_ptr = _ptr(base, row, S_S2, S, ALIGNED)
    ms = _load(ms_ptr, offs, mask, S) * rho + (g * keep) * g
    if CENTERED:
        mg_ptr = _ptr(base, row, S_S3, S, ALIGNED)
        mg = _load(mg_ptr, offs, mask, S) * rho + g * keep
        den = (ms - mg * mg) + eps
        _store(mg_ptr, offs, mg, mask, S)
    else:
        den = ms + eps
    mom = _load(mom_ptr, offs, mask, S) * mu + tl.math.div_rn(g * lr, tl.sqrt_rn(den))
    _store(ms_ptr, offs, ms, mask, S)
    _store(mom_ptr, offs, mom, mask, S)
    _store_w(base, row, w_ptr, offs, w - mom, mask, W, P, ALIGNED)


@triton.jit
def adagrad_kernel(base, blocks, rows, grads, per, found, eps, W: tl.constexpr, G: tl.constexpr, P: tl.constexpr,
                   S: tl.constexpr, HAS_FOUND: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
    """moment = moment + g*g; w = w - (g*lr)/(sqrt(moment) + eps)."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    lr = tl.load(per + t * PER + P_LR)
    w_ptr, w, g = _value_grad(base, row, grads, per, t, offs, mask, W, G, ALIGNED)
    m_ptr = _ptr(base, row, S_S1, S, ALIGNED)
    m = _load(m_ptr, offs, mask, S) + g * g
    w = w - tl.math.div_rn(g * lr, tl.sqrt_rn(m) + eps)
    _store(m_ptr, offs, m, mask, S)
    _store_w(base, row, w_ptr, offs, w, mask, W, P, ALIGNED)


@triton.jit
def adadelta_kernel(base, blocks, rows, grads, per, found, rho, keep, eps, W: tl.constexpr, G: tl.constexpr,
                    P: tl.constexpr, S: tl.constexpr, HAS_FOUND: tl.constexpr, ALIGNED: tl.constexpr,
                    BLOCK: tl.constexpr):
    """asg = asg*rho + (g*g)*keep; u = -((sqrt(asu + eps)/sqrt(asg + eps))*g); w = w + u*lr;
    asu = asu*rho + (u*u)*keep."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    lr = tl.load(per + t * PER + P_LR)
    w_ptr, w, g = _value_grad(base, row, grads, per, t, offs, mask, W, G, ALIGNED)
    asg_ptr = _ptr(base, row, S_S1, S, ALIGNED)
    asu_ptr = _ptr(base, row, S_S2, S, ALIGNED)
    asg = _load(asg_ptr, offs, mask, S) * rho + (g * g) * keep
    asu = _load(asu_ptr, offs, mask, S)
    u = -(tl.math.div_rn(tl.sqrt_rn(asu + eps), tl.sqrt_rn(asg + eps)) * g)
    w = w + u * lr
    asu = asu * rho + (u * u) * keep
    _store(asg_ptr, offs, asg, mask, S)
    _store(asu_ptr, offs, asu, mask, S)
    _store_w(base, row, w_ptr, offs, w, mask, W, P, ALIGNED)


@triton.jit
def adamax_kernel(base, blocks, rows, grads, per, found, b1, c1, b2, eps, W: tl.constexpr, G: tl.constexpr,
                  P: tl.constexpr, S: tl.constexpr, HAS_FOUND: tl.constexpr, ALIGNED: tl.constexpr,
                  BLOCK: tl.constexpr):
    """m = m*b1 + g*c1; inf = inf*b2 + eps, then |g| unless |g| < inf (a NaN |g| kept);
    w = w - (m/inf)*(lr/(1 - b1^t)). The beta power is advanced by the optimizer afterwards."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    lr_t = tl.math.div_rn(tl.load(per + t * PER + P_LR), 1.0 - _pow1(base, row))
    w_ptr, w, g = _value_grad(base, row, grads, per, t, offs, mask, W, G, ALIGNED)
    m_ptr = _ptr(base, row, S_S1, S, ALIGNED)
    inf_ptr = _ptr(base, row, S_S2, S, ALIGNED)
    m = _load(m_ptr, offs, mask, S) * b1 + g * c1
    inf = _load(inf_ptr, offs, mask, S) * b2 + eps
    a = tl.abs(g)
    inf = tl.where(a < inf, inf, a)
    w = w - tl.math.div_rn(m, inf) * lr_t
    _store(m_ptr, offs, m, mask, S)
    _store(inf_ptr, offs, inf, mask, S)
    _store_w(base, row, w_ptr, offs, w, mask, W, P, ALIGNED)


@triton.jit
def asgd_kernel(base, blocks, rows, grads, per, found, NB: tl.constexpr, W: tl.constexpr, G: tl.constexpr,
                P: tl.constexpr, S: tl.constexpr, HAS_FOUND: tl.constexpr, ALIGNED: tl.constexpr,
                BLOCK: tl.constexpr):
    """With the update count m (int64, slot 7; advanced by the caller afterwards) and
    y_i = y[m % NB]: d = (d - y_i) + g; y_i = g; w = w - d*(lr/min(m + 1, NB))."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    count = tl.load((base + tl.load(row + S_POW1)).to(tl.pointer_type(tl.int64)))
    n = tl.minimum(count + 1, NB)
    factor = tl.math.div_rn(tl.load(per + t * PER + P_LR), n.to(tl.float32))
    w_ptr, w, g = _value_grad(base, row, grads, per, t, offs, mask, W, G, ALIGNED)
    d_ptr = _ptr(base, row, S_S1, S, ALIGNED)
    y_ptr = _ptr(base, row, S_S2, S, ALIGNED) + (count % NB) * tl.load(row + S_N)
    d = (_load(d_ptr, offs, mask, S) - _load(y_ptr, offs, mask, S)) + g
    _store(y_ptr, offs, g, mask, S)
    _store(d_ptr, offs, d, mask, S)
    _store_w(base, row, w_ptr, offs, w - d * factor, mask, W, P, ALIGNED)


@triton.jit
def rprop_kernel(base, blocks, rows, grads, per, found, lo, hi, eta_minus, eta_plus, W: tl.constexpr,
                 G: tl.constexpr, P: tl.constexpr, HAS_FOUND: tl.constexpr, ALIGNED: tl.constexpr,
                 BLOCK: tl.constexpr):
    """s = g*prev: rate*eta_plus where s > 0, rate*eta_minus and g taken as +0 where s < 0, else
    rate*1; the rate clamped to [lo, hi] (NaN kept); w = w - sign(g)*rate; prev = g."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    w_ptr, w, g = _value_grad(base, row, grads, per, t, offs, mask, W, G, ALIGNED)
    prev_ptr = _ptr(base, row, S_S1, W, ALIGNED)
    rate_ptr = _ptr(base, row, S_S2, W, ALIGNED)
    s = g * _load(prev_ptr, offs, mask, W)
    rising = s > 0
    falling = s < 0
    prev = tl.where(falling, 0.0, g)
    rate = _load(rate_ptr, offs, mask, W) * tl.where(rising, eta_plus, tl.where(falling, eta_minus, 1.0))
    rate = tl.where(rate != rate, rate, tl.minimum(tl.maximum(rate, lo), hi))
    sign = (prev > 0).to(tl.float32) - (prev < 0).to(tl.float32)
    _store(prev_ptr, offs, prev, mask, W)
    _store(rate_ptr, offs, rate, mask, W)
    _store_w(base, row, w_ptr, offs, w - sign * rate, mask, W, P, ALIGNED)


@triton.jit
def _moments(base, row, g, offs, mask, b1, c1, b2, c2, S: tl.constexpr, ALIGNED: tl.constexpr):
    """Adam's moments as the Eigen forms round them (slots 4 and 5), stored: m1 = m1*b1 + g*c1,
    m2 = m2*b2 + (g*c2)*g."""
    m1_ptr = _ptr(base, row, S_S1, S, ALIGNED)
    m2_ptr = _ptr(base, row, S_S2, S, ALIGNED)
    m1 = _load(m1_ptr, offs, mask, S) * b1 + g * c1
    m2 = _load(m2_ptr, offs, mask, S) * b2 + (g * c2) * g
    _store(m1_ptr, offs, m1, mask, S)
    _store(m2_ptr, offs, m2, mask, S)
    return m1, m2


@triton.jit
def _radam_powers(base, row, pow3, t, b1, b2):
    """RAdam's powers of this step: beta1^t, beta2^t and rho, from the row's previous ones."""
    beta1_pow = _pow1(base, row) * b1
    beta2_pow = _pow2(base, row) * b2
    rho_ptr = (base + tl.load(pow3 + t)).to(tl.pointer_type(tl.float32))
    rho = tl.math.div_rn(tl.load(rho_ptr) * (b2 - beta2_pow) + beta2_pow, 1.0 - beta2_pow)
    return beta1_pow, beta2_pow, rho, rho_ptr


@triton.jit
def radam_kernel(base, blocks, rows, grads, per, pow3, found, b1, c1, b2, c2, eps, rho_inf, W: tl.constexpr,
                 G: tl.constexpr, P: tl.constexpr, S: tl.constexpr, HAS_FOUND: tl.constexpr, ALIGNED: tl.constexpr,
                 BLOCK: tl.constexpr):
    """step = (m1*(1/(1 - beta1^t)))*lr; where rho_t = rho_inf - 2*rho > 5 also
    step = (step*r_t)*(sqrt(1 - beta2^t)/(sqrt(m2) + eps)); w = w - step. The powers are read
    here and advanced afterwards (``radam_powers_kernel``)."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    lr = tl.load(per + t * PER + P_LR)
    beta1_pow, beta2_pow, rho, _ = _radam_powers(base, row, pow3, t, b1, b2)
    rho_t = rho_inf - 2.0 * rho
    w_ptr, w, g = _value_grad(base, row, grads, per, t, offs, mask, W, G, ALIGNED)
    m1, m2 = _moments(base, row, g, offs, mask, b1, c1, b2, c2, S, ALIGNED)
    step = (m1 * tl.math.div_rn(1.0, 1.0 - beta1_pow)) * lr
    if rho_t > 5.0:
        num = ((rho_t - 4.0) * (rho_t - 2.0)) * rho_inf
        den = ((rho_inf - 4.0) * (rho_inf - 2.0)) * rho_t
        r_t = tl.sqrt_rn(tl.math.div_rn(num, den))
        l_t = tl.math.div_rn(tl.sqrt_rn(1.0 - beta2_pow) + tl.full([BLOCK], 0.0, tl.float32), tl.sqrt_rn(m2) + eps)
        step = (step * r_t) * l_t
    _store_w(base, row, w_ptr, offs, w - step, mask, W, P, ALIGNED)


@triton.jit
def radam_powers_kernel(base, rows, pow3, found, b1, b2, HAS_FOUND: tl.constexpr):
    """Program ``t`` advances row ``t``'s powers as ``radam_kernel`` computed them (not on a skipped step)."""
    t = tl.program_id(0).to(tl.int64)
    row = rows + t * ROW
    beta1_pow, beta2_pow, rho, rho_ptr = _radam_powers(base, row, pow3, t, b1, b2)
    _store_powers(base, row, found, beta1_pow, beta2_pow, rho_ptr, rho, HAS_FOUND)


@triton.jit
def _store_powers(base, row, found, first, second, third_ptr, third, HAS_FOUND: tl.constexpr):
    """A row's three advanced powers stored (its two, and the third at ``third_ptr``), not on a
    skipped step: one-element blocks (adding +0.0 changes no power: none is -0.0)."""
    keep = tl.full([1], 1, tl.int1)
    if HAS_FOUND:
        keep = (tl.load(found) + tl.full([1], 0.0, tl.float32)) == 0
    zero = tl.arange(0, 1)
    tl.store(_ptr(base, row, S_POW1, F32, False) + zero, first + tl.full([1], 0.0, tl.float32), mask=keep)
    tl.store(_ptr(base, row, S_POW2, F32, False) + zero, second + tl.full([1], 0.0, tl.float32), mask=keep)
    tl.store(third_ptr + zero, third + tl.full([1], 0.0, tl.float32), mask=keep)


@triton.jit
def lamb_direction_kernel(base, blocks, rows, grads, per, found, directions, offsets, b1, c1, b2, c2, eps,
                          W: tl.constexpr, G: tl.constexpr, S: tl.constexpr, HAS_FOUND: tl.constexpr,
                          ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
    """Lamb's first pass: the moments, and the direction (m1*(1/(1 - b1^t)))/(sqrt(m2*(1/(1 - b2^t)))
    + eps) + w*decay written at the tensor's offset in ``directions`` (16-byte aligned)."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    decay = tl.load(per + t * PER + P_DECAY)
    inv1 = tl.math.div_rn(1.0, 1.0 - _pow1(base, row))
    inv2 = tl.math.div_rn(1.0, 1.0 - _pow2(base, row))
    _, w, g = _value_grad(base, row, grads, per, t, offs, mask, W, G, ALIGNED)
    m1, m2 = _moments(base, row, g, offs, mask, b1, c1, b2, c2, S, ALIGNED)
    direction = tl.math.div_rn(m1 * inv1, tl.sqrt_rn(m2 * inv2) + eps) + w * decay
    start = tl.load(offsets + t)
    if ALIGNED:
        start = tl.multiple_of(start, 4)
    tl.store(directions + start + offs, direction, mask=mask)


@triton.jit
def lamb_update_kernel(base, blocks, rows, grads, per, found, directions, offsets, p_squares, d_squares,
                       W: tl.constexpr, P: tl.constexpr, ALWAYS_ADAPT: tl.constexpr, HAS_FOUND: tl.constexpr,
                       ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
    """Lamb's second pass: with the squared norms of the value (``p_squares[t]``) and of the direction
    (``d_squares[t]``), ratio = sqrt(p)/sqrt(d) where the row decays (or ALWAYS_ADAPT) and both
    roots are positive, else 1; w = w - direction*(lr*ratio)."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    lr = tl.load(per + t * PER + P_LR)
    p_norm = tl.sqrt_rn(tl.load(p_squares + t))
    d_norm = tl.sqrt_rn(tl.load(d_squares + t))
    adapt = (tl.load(per + t * PER + P_DECAY) != 0.0) | ALWAYS_ADAPT
    ratio = tl.where(adapt & (p_norm > 0.0) & (d_norm > 0.0), tl.math.div_rn(p_norm, d_norm), 1.0)
    start = tl.load(offsets + t)
    if ALIGNED:
        start = tl.multiple_of(start, 4)
    direction = tl.load(directions + start + offs, mask=mask, other=0.0)
    w_ptr = _ptr(base, row, S_W, W, ALIGNED)
    w = _load(w_ptr, offs, mask, W) - direction * (lr * ratio)
    _store_w(base, row, w_ptr, offs, w, mask, W, P, ALIGNED)


@triton.jit
def _nadam_powers(base, row, pow3, t, table, b1, b2, c096, p096, TABLE: tl.constexpr):
    """NAdam's powers of this step from the row's previous ones, and mu_t, mu_next. The power
    ``decay_pow**momentum_decay`` is the C library's, from the host's table of the values
    ``decay_pow`` takes (``table[:TABLE]``, descending from 0.96, each step times 0.96) and their
    powers (``table[TABLE:]``), found by bisection."""
    decay_pow = _pow1(base, row) * c096
    beta2_pow = _pow2(base, row) * b2
    lo = 0
    hi = TABLE - 1
    for _ in tl.static_range(12):  # 2**12 > TABLE
        mid = (lo + hi) // 2
        right = tl.load(table + mid) > decay_pow
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(right, hi, mid)
    half = 0.5 * tl.load(table + TABLE + lo)
    mu_t = b1 * (1.0 - half)
    mu_next = b1 * (1.0 - half * p096)
    mu_ptr = (base + tl.load(pow3 + t)).to(tl.pointer_type(tl.float32))
    mu_product = tl.load(mu_ptr) * mu_t
    return decay_pow, beta2_pow, mu_product, mu_t, mu_next, mu_ptr


@triton.jit
def nadam_kernel(base, blocks, rows, grads, per, pow3, found, table, b1, c1, b2, c2, eps, c096, p096,
                 TABLE: tl.constexpr, W: tl.constexpr, G: tl.constexpr, P: tl.constexpr, S: tl.constexpr,
                 HAS_FOUND: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
    """m_hat = (m1*mu_next)*(1/(1 - mu_product*mu_next)) + (g*(1 - mu_t))*(1/(1 - mu_product));
    w = w - (m_hat*lr)/(sqrt(m2*(1/(1 - beta2^t))) + eps). The powers are read here and advanced
    afterwards (``nadam_powers_kernel``)."""
    t, row, offs, mask = _block(blocks, rows, found, HAS_FOUND, ALIGNED, BLOCK)
    lr = tl.load(per + t * PER + P_LR)
    _, beta2_pow, mu_product, mu_t, mu_next, _ = _nadam_powers(base, row, pow3, t, table, b1, b2, c096, p096, TABLE)
    r1 = tl.math.div_rn(1.0, 1.0 - mu_product * mu_next)
    r2 = tl.math.div_rn(1.0, 1.0 - mu_product)
    r3 = tl.math.div_rn(1.0, 1.0 - beta2_pow)
    w_ptr, w, g = _value_grad(base, row, grads, per, t, offs, mask, W, G, ALIGNED)
    m1, m2 = _moments(base, row, g, offs, mask, b1, c1, b2, c2, S, ALIGNED)
    m_hat = (m1 * mu_next) * r1 + (g * (1.0 - mu_t)) * r2
    den = tl.sqrt_rn(m2 * r3) + eps
    _store_w(base, row, w_ptr, offs, w - tl.math.div_rn(m_hat * lr, den), mask, W, P, ALIGNED)


@triton.jit
def nadam_powers_kernel(base, rows, pow3, found, table, b1, b2, c096, p096, TABLE: tl.constexpr,
                        HAS_FOUND: tl.constexpr):
    """Program ``t`` advances row ``t``'s powers as ``nadam_kernel`` computed them (not on a skipped step)."""
    t = tl.program_id(0).to(tl.int64)
    row = rows + t * ROW
    decay_pow, beta2_pow, mu_product, _, _, mu_ptr = _nadam_powers(base, row, pow3, t, table, b1, b2, c096, p096,
                                                                   TABLE)
    _store_powers(base, row, found, decay_pow, beta2_pow, mu_ptr, mu_product, HAS_FOUND)
