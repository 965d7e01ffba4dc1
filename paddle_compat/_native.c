/* paddle_compat's compiled CPU kernels: the optimizers' updates and Paddle's CPU sum of squares
 * (and the CPU's rsqrtps, which Paddle's Eigen float32 sqrt refines; and the GradScaler's check of
 * the grads).
 *
 * Built when the package is installed (setup.py, with the levels and flags of _native_build.py):
 * one shared library per instruction-set level, the level picked at load time (pc_cpu_level), all
 * with flags that keep IEEE semantics: -ffp-contract=off (no multiply-add is fused unless written
 * as fmaf/fma here) and no -ffast-math; pc_selftest probes that a build kept them. Each update is
 * the formula of the torch fallback in paddle_compat/optimizer/ (the CPU forms of Paddle's
 * kernels), operation for operation and operand for operand, so both give the same bits, at every
 * level: fmaf is the fused multiply-add of Paddle's AVX-512 Adam kernel, sqrtf the correctly
 * rounded root.
 *
 * Tensors are described by rows of ROW int64 values (see enum slot): element count, data
 * pointers, and the dtypes packed in one value. The value updated ("w") is the float32 master
 * weight or the parameter itself; "p" is a low-precision parameter refreshed from the master.
 * Per-tensor float arguments come in rows of PER doubles. Operands stored in another dtype than
 * the compute type are widened into local buffers of CHUNK elements and narrowed back, so the
 * arithmetic loops always run on plain float/double arrays, and vectorise.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#elif defined(__SSE__)
#include <xmmintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* The row layout, declared in _native.py (same names; tests/test_native.py checks they agree). */
enum dtype { DT_F32 = 0, DT_F64 = 1, DT_BF16 = 2, DT_F16 = 3, DT_NONE = 15 };
enum slot { S_N, S_W, S_G, S_P, S_S1, S_S2, S_S3, S_POW1, S_POW2, S_DT, ROW };
enum per { P_LR, P_DECAY, P_L2, P_SPARE, PER }; /* P_DECAY, P_L2: NaN when absent */
/* the packed dtypes of slot S_DT: DT_BITS bits per operand, at these shifts */
enum dtype_field { DT_W = 0, DT_G = 4, DT_P = 8, DT_S = 12, DT_BITS = 4 };
#define DT_MASK ((1 << DT_BITS) - 1)

#define CHUNK 1024
#define BLOCK 4096          /* elements per loop call on float32 operands used in place */
#define AHEAD (8 * BLOCK)   /* how far ahead of the loop those operands are prefetched */
/* Elements per thread below which handing work to another thread costs more than it saves: the
 * cheaper the update per element, the more elements a thread needs. */
#define GRAIN_SGD (1 << 18)
#define GRAIN_MOMENTUM (1 << 17)
#define GRAIN_ADAM (1 << 16)

/* --- float32 <-> bfloat16 / float16 conversions, as torch's vectorised casts ------------------ */
static inline uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline uint16_t bf16_from_float(float f) {
    uint32_t u = bits_of(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; /* to nearest, ties to even */
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? 0xffffu : rounded); /* NaN: all ones */
}
static inline float float_from_bf16(uint16_t h) { return float_of((uint32_t)h << 16); }

static inline uint16_t f16_from_float(float f) {
    uint32_t u = bits_of(f), a = u & 0x7fffffffu;
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu); /* quiet, payload kept (F16C's vcvtps2ph) */
    uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13; /* rebias 127 -> 15 */
    /* below 2**-14: adding 0.5 leaves the value's multiple of 2**-24 in the low bits, rounded */
    uint32_t subnormal = bits_of(float_of(a) + 0.5f) - 0x3f000000u;
    uint32_t is_nan = -(uint32_t)(a > 0x7f800000u), is_inf = -(uint32_t)(a >= 0x477ff000u) & ~is_nan;
    uint32_t is_normal = -(uint32_t)(a >= 0x38800000u) & ~is_inf & ~is_nan;
    uint32_t is_subnormal = ~(is_nan | is_inf | is_normal);
    return (uint16_t)(sign | (nan & is_nan) | (0x7c00u & is_inf) | (normal & is_normal) | (subnormal & is_subnormal));
}
static inline float float_from_f16(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16, a = (uint32_t)h & 0x7fffu;
    uint32_t normal = (a << 13) + 0x38000000u;
    uint32_t special = (a << 13) | 0x7f800000u | ((uint32_t)(a > 0x7c00u) << 22); /* inf, quiet NaN */
    uint32_t subnormal = (bits_of((float)(int32_t)a) - (24u << 23)) & -(uint32_t)(a != 0); /* a * 2**-24 */
    /* selected with masks: chained conditionals keep GCC from vectorising the loops around */
    uint32_t is_normal = -(uint32_t)(a >= 0x0400u), is_special = -(uint32_t)(a >= 0x7c00u);
    return float_of(sign | (subnormal & ~is_normal) | (normal & is_normal & ~is_special) | (special & is_special));
}
/* A float rounded to bfloat16/float16 and back: one operation of torch's low-precision arithmetic. */
static inline float round_bf16(float x) { return float_from_bf16(bf16_from_float(x)); }
static inline float round_f16(float x) { return float_from_f16(f16_from_float(x)); }
#define ROUND_NONE(x) (x)

/* --- operands in the compute type -------------------------------------------------------------- */
/* Pointer to len elements of a float32 compute operand at off: the tensor itself, or buf filled. */
static float *load_f(void *base, int dt, int64_t off, int64_t len, float *restrict buf) {
    if (dt == DT_F32) return (float *)base + off;
    if (dt == DT_BF16) {
        const uint16_t *src = (const uint16_t *)base + off;
        for (int64_t i = 0; i < len; i++) buf[i] = float_from_bf16(src[i]);
    } else {
        const uint16_t *src = (const uint16_t *)base + off;
        for (int64_t i = 0; i < len; i++) buf[i] = float_from_f16(src[i]);
    }
    return buf;
}
/* Write back a float32 operand loaded with load_f (nothing to do when it was the tensor itself). */
static void store_f(void *base, int dt, int64_t off, int64_t len, const float *restrict src) {
    if (dt == DT_F32) {
        float *dst = (float *)base + off;
        if (dst != src) memcpy(dst, src, (size_t)len * sizeof(float));
    } else if (dt == DT_BF16) {
        uint16_t *dst = (uint16_t *)base + off;
        for (int64_t i = 0; i < len; i++) dst[i] = bf16_from_float(src[i]);
    } else {
        uint16_t *dst = (uint16_t *)base + off;
        for (int64_t i = 0; i < len; i++) dst[i] = f16_from_float(src[i]);
    }
}

static inline int dt_w(int64_t packed) { return (int)((packed >> DT_W) & DT_MASK); }
static inline int dt_g(int64_t packed) { return (int)((packed >> DT_G) & DT_MASK); }
static inline int dt_p(int64_t packed) { return (int)((packed >> DT_P) & DT_MASK); }
static inline int dt_s(int64_t packed) { return (int)((packed >> DT_S) & DT_MASK); }
#define ROW_PTR(rows, t, s) ((void *)(intptr_t)(rows)[(t) * ROW + (s)])
#define PTR(t, s) ROW_PTR(c->rows, t, s)

/* --- the work list, split across threads ------------------------------------------------------- */
/* An optimizer's update loop over elements [off, off+len) of tensor t (dt: the row's packed dtypes). */
typedef void (*loop_fn)(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt);

typedef struct {
    const void *ctx;
    loop_fn f64, f32; /* the loops for float64 tensors and for the float32 compute type */
    const int64_t *rows;
    int64_t count, lo, hi; /* the range of the concatenated elements this worker updates */
} range_t;

/* Asks for one cache line of each float32 operand of tensor t at element `at`, ahead of its use.
 * The loops stream their operands once, and the hardware prefetcher does not cross 4 KiB pages.
 * One line per BLOCK (16 KiB, four pages), AHEAD elements on, is what measured best: without it
 * the SGD loop ran 7-10% slower than torch's add_ on 10M cache-cold parameters; one line per page,
 * or every line, was no faster (one line per page) or slower (every line). */
static inline void prefetch_f32(const int64_t *rows, int64_t t, int64_t at) {
    static const int written[] = {S_W, S_S1, S_S2, S_S3};
    __builtin_prefetch((const float *)ROW_PTR(rows, t, S_G) + at, 0);
    for (int k = 0; k < 4; k++) {
        const float *base = (const float *)ROW_PTR(rows, t, written[k]);
        if (base) __builtin_prefetch(base + at, 1);
    }
}

/* Elements [off, off+len) of tensor t: the float64 loop at once; the float32 loop BLOCK elements
 * at a time, prefetching AHEAD elements on, when every operand is float32 (used in place), else
 * CHUNK elements at a time (the size of the local buffers operands are widened into), each chunk
 * then refreshing the low-precision parameter (when there is one) from its float32 master weight. */
static void run_piece(const range_t *r, int64_t t, int64_t off, int64_t len) {
    int64_t dt = r->rows[t * ROW + S_DT];
    if (dt_w(dt) == DT_F64) { r->f64(r->ctx, t, off, len, dt); return; }
    int in_place = dt_w(dt) == DT_F32 && dt_g(dt) == DT_F32 && (dt_s(dt) == DT_F32 || dt_s(dt) == DT_NONE);
    int64_t step = in_place ? BLOCK : CHUNK;
    for (int64_t o = off, end = off + len; o < end; o += step) {
        int64_t n = end - o < step ? end - o : step;
        if (in_place && o + AHEAD < end) prefetch_f32(r->rows, t, o + AHEAD);
        r->f32(r->ctx, t, o, n, dt);
        if (dt_p(dt) != DT_NONE)
            store_f(ROW_PTR(r->rows, t, S_P), dt_p(dt), o, n, (float *)ROW_PTR(r->rows, t, S_W) + o);
    }
}

static void run_range(const range_t *r) {
    int64_t start = 0;
    for (int64_t t = 0; t < r->count && start < r->hi; t++) {
        int64_t n = r->rows[t * ROW + S_N], end = start + n;
        int64_t a = r->lo > start ? r->lo - start : 0, b = r->hi < end ? r->hi - start : n;
        if (b > a) run_piece(r, t, a, b - a);
        start = end;
    }
}

/* Run the loops over every element of every tensor, on up to nthreads threads (this one included).
 * The threads are OpenMP's: built with -fopenmp, this library binds to the OpenMP runtime torch has
 * loaded already (same soname), so it shares torch's thread pool, warm from torch's own ops,
 * instead of adding threads that would compete with it for the cores. */
static void for_all(const void *ctx, loop_fn f64, loop_fn f32, const int64_t *rows, int64_t count, int nthreads,
                    int64_t grain) {
    int64_t total = 0;
    for (int64_t t = 0; t < count; t++) total += rows[t * ROW + S_N];
    int64_t workers = total / grain;
    if (workers > nthreads) workers = nthreads;
#ifdef _OPENMP
    if (workers > 1) {
#pragma omp parallel num_threads((int)workers)
        {
            int64_t n = omp_get_num_threads(), k = omp_get_thread_num();
            int64_t per = ((total + n - 1) / n + 63) & ~(int64_t)63; /* whole cache lines per thread */
            int64_t lo = k * per < total ? k * per : total, hi = lo + per < total ? lo + per : total;
            range_t mine = {ctx, f64, f32, rows, count, lo, hi};
            run_range(&mine);
        }
        return;
    }
#endif
    range_t all = {ctx, f64, f32, rows, count, 0, total};
    run_range(&all);
}

/* ================================================================================================
 * SGD: w = w - g*rate, each operation rounded in w's dtype (rate: the rate rounded to it).
 * With L2 decay (gradients of float32/float64 only) g = g + w*coeff first, in g's dtype.
 * ============================================================================================== */
typedef struct {
    const int64_t *rows;
    const double *per;
} sgd_ctx;

#define SGD_LOOP(T, R)                                                                             \
    for (int64_t i = 0; i < len; i++) {                                                            \
        T gi = g[i];                                                                               \
        if (has_l2) gi = gi + w[i] * l2;                                                           \
        if (round_g) gi = R(gi);                                                                   \
        w[i] = R(w[i] - R(gi * rate));                                                             \
    }

static void sgd_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    const sgd_ctx *c = (const sgd_ctx *)ctx;
    double *restrict w = (double *)PTR(t, S_W) + off;
    const double *restrict g = (const double *)PTR(t, S_G) + off;
    const double rate = c->per[t * PER + P_LR], l2 = c->per[t * PER + P_L2];
    const int has_l2 = l2 == l2, round_g = 0;
    SGD_LOOP(double, ROUND_NONE)
}

static void sgd_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    const sgd_ctx *c = (const sgd_ctx *)ctx;
    const int wt = dt_w(dt), gt = dt_g(dt);
    float wbuf[CHUNK], gbuf[CHUNK];
    float *restrict w = load_f(PTR(t, S_W), wt, off, len, wbuf);
    const float *restrict g = load_f(PTR(t, S_G), gt, off, len, gbuf);
    const double l2_d = c->per[t * PER + P_L2];
    const float rate = (float)c->per[t * PER + P_LR], l2 = (float)l2_d;
    const int has_l2 = l2_d == l2_d, round_g = gt != wt;
    if (wt == DT_BF16) { SGD_LOOP(float, round_bf16) }
    else if (wt == DT_F16) { SGD_LOOP(float, round_f16) }
    else if (has_l2) { SGD_LOOP(float, ROUND_NONE) }
    else { for (int64_t i = 0; i < len; i++) w[i] = w[i] - g[i] * rate; }
    store_f(PTR(t, S_W), wt, off, len, w);
}

int pc_sgd(int64_t count, const int64_t *rows, const double *per, int nthreads) {
    sgd_ctx c = {rows, per};
    for_all(&c, sgd_f64, sgd_f32, rows, count, nthreads, GRAIN_SGD);
    return 0;
}

/* ================================================================================================
 * Momentum, every operation rounded in w's dtype (the velocity's):
 *   g = g + w*coeff (fused L2, when coeff != 0);  v = v*mu + g;
 *   w = w - v*lr,  or with Nesterov  w = w - (g + v*mu)*lr.
 * ============================================================================================== */
typedef struct {
    const int64_t *rows;
    const double *per;
    double mu, coeff;
    int nesterov;
} momentum_ctx;

#define MOMENTUM_LOOP(T, R)                                                                        \
    for (int64_t i = 0; i < len; i++) {                                                            \
        T gi = g[i], wi = w[i];                                                                    \
        if (round_g) gi = R(gi);                                                                   \
        if (has_coeff) gi = R(gi + R(wi * coeff));                                                 \
        T vi = R(R(v[i] * mu) + gi);                                                               \
        v[i] = vi;                                                                                 \
        T step = nesterov ? R(R(gi + R(vi * mu)) * lr) : R(vi * lr);                               \
        w[i] = R(wi - step);                                                                       \
    }

static void momentum_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    const momentum_ctx *c = (const momentum_ctx *)ctx;
    double *restrict w = (double *)PTR(t, S_W) + off;
    const double *restrict g = (const double *)PTR(t, S_G) + off;
    double *restrict v = (double *)PTR(t, S_S1) + off;
    const double lr = c->per[t * PER + P_LR], mu = c->mu, coeff = c->coeff;
    const int has_coeff = coeff != 0.0, nesterov = c->nesterov, round_g = 0;
    MOMENTUM_LOOP(double, ROUND_NONE)
}

static void momentum_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    const momentum_ctx *c = (const momentum_ctx *)ctx;
    const int wt = dt_w(dt), gt = dt_g(dt);
    float wbuf[CHUNK], gbuf[CHUNK], vbuf[CHUNK];
    float *restrict w = load_f(PTR(t, S_W), wt, off, len, wbuf);
    const float *restrict g = load_f(PTR(t, S_G), gt, off, len, gbuf);
    float *restrict v = load_f(PTR(t, S_S1), wt, off, len, vbuf); /* the velocity has w's dtype */
    const float lr = (float)c->per[t * PER + P_LR], mu = (float)c->mu, coeff = (float)c->coeff;
    const int has_coeff = coeff != 0.0f, nesterov = c->nesterov, round_g = gt != wt;
    if (wt == DT_BF16) { MOMENTUM_LOOP(float, round_bf16) }
    else if (wt == DT_F16) { MOMENTUM_LOOP(float, round_f16) }
    else { MOMENTUM_LOOP(float, ROUND_NONE) }
    store_f(PTR(t, S_S1), wt, off, len, v);
    store_f(PTR(t, S_W), wt, off, len, w);
}

int pc_momentum(int64_t count, const int64_t *rows, const double *per, double mu, double coeff, int nesterov,
                int nthreads) {
    momentum_ctx c = {rows, per, mu, coeff, nesterov};
    for_all(&c, momentum_f64, momentum_f32, rows, count, nthreads, GRAIN_MOMENTUM);
    return 0;
}

/* ================================================================================================
 * Adam / AdamW (Paddle's CPU kernels), in the compute type T (float32, or float64):
 *   lr_t = lr*(sqrt(1-b2^t)/(1-b1^t)),  eps_t = eps*sqrt(1-b2^t)           (per tensor)
 *   AVX-512 form ("fused"):  w = fma(-decay, w, w)                            (AdamW)
 *                            m = fma(b1, m, g*(1-b1));  v = fma(b2, v, (g*g)*(1-b2))
 *                            w = fma(m/(sqrt(v)+eps_t), -lr_t, w)
 *   reference form:          w = w - w*decay;  m = m*b1 + g*(1-b1);  v = v*b2 + (g*(1-b2))*g
 *                            w = w + (-lr_t)*(m/(sqrt(v)+eps_t))  in double, rounded once
 * (the profiles avx512f and avx2 of _paddle_cpu.py; float64 always takes the reference form)
 * amsgrad takes sqrt(max(v, v_max)) and stores the max; Adam's L2 decay (float32/float64
 * gradients) is g = g + w*coeff first. The beta powers are multiplied by b1, b2 afterwards.
 * ============================================================================================== */
typedef struct {
    const int64_t *rows;
    const double *per;
    double *scratch; /* per tensor: lr_t, eps_t */
    double b1, b2;
    int fused, amsgrad;
} adam_ctx;

/* NaN in either operand gives the all-ones NaN, as torch's vectorised maximum */
#define MAX_NAN(T, ONES, a, b) (((a) != (a) || (b) != (b)) ? ONES : ((a) > (b) ? (a) : (b)))

#define ADAM_LOOP(T, FMA, SQRT, ONES, FUSED, AMS, DECAY, L2)                                       \
    for (int64_t i = 0; i < len; i++) {                                                            \
        T wi = w[i], gi = g[i];                                                                    \
        if (L2) gi = gi + wi * l2;                                                                 \
        if (DECAY) wi = FUSED ? FMA(-decay, wi, wi) : wi - wi * decay;                             \
        T mi = FUSED ? FMA(b1, m[i], gi * c1) : m[i] * b1 + gi * c1;                               \
        T vi = FUSED ? FMA(b2, v[i], (gi * gi) * c2) : v[i] * b2 + (gi * c2) * gi;                 \
        m[i] = mi;                                                                                 \
        v[i] = vi;                                                                                 \
        if (AMS) {                                                                                 \
            vi = MAX_NAN(T, ONES, vi, vmax[i]);                                                    \
            vmax[i] = vi;                                                                          \
        }                                                                                          \
        if (FUSED) {                                                                               \
            w[i] = FMA(mi / (SQRT(vi) + eps_t), -lr_t, wi);                                        \
        } else { /* the reference kernel's sqrt is C's double sqrt: the update runs in double */   \
            w[i] = (T)((double)wi + (double)-lr_t * ((double)mi / (sqrt((double)vi) + (double)eps_t))); \
        }                                                                                          \
    }

/* One specialised loop per flag combination (the flags are constants inside each). */
#define ADAM_DISPATCH(T, FMA, SQRT, ONES)                                                          \
    if (fused) {                                                                                   \
        if (ams) { if (has_decay) { ADAM_LOOP(T, FMA, SQRT, ONES, 1, 1, 1, 0) } else if (has_l2) { ADAM_LOOP(T, FMA, SQRT, ONES, 1, 1, 0, 1) } else { ADAM_LOOP(T, FMA, SQRT, ONES, 1, 1, 0, 0) } } \
        else { if (has_decay) { ADAM_LOOP(T, FMA, SQRT, ONES, 1, 0, 1, 0) } else if (has_l2) { ADAM_LOOP(T, FMA, SQRT, ONES, 1, 0, 0, 1) } else { ADAM_LOOP(T, FMA, SQRT, ONES, 1, 0, 0, 0) } } \
    } else {                                                                                       \
        if (ams) { if (has_decay) { ADAM_LOOP(T, FMA, SQRT, ONES, 0, 1, 1, 0) } else if (has_l2) { ADAM_LOOP(T, FMA, SQRT, ONES, 0, 1, 0, 1) } else { ADAM_LOOP(T, FMA, SQRT, ONES, 0, 1, 0, 0) } } \
        else { if (has_decay) { ADAM_LOOP(T, FMA, SQRT, ONES, 0, 0, 1, 0) } else if (has_l2) { ADAM_LOOP(T, FMA, SQRT, ONES, 0, 0, 0, 1) } else { ADAM_LOOP(T, FMA, SQRT, ONES, 0, 0, 0, 0) } } \
    }

static inline double no_fma(double a, double b, double c) { return a * b + c; } /* never called */

static void adam_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    const adam_ctx *c = (const adam_ctx *)ctx;
    double *restrict w = (double *)PTR(t, S_W) + off;
    const double *restrict g = (const double *)PTR(t, S_G) + off;
    double *restrict m = (double *)PTR(t, S_S1) + off;
    double *restrict v = (double *)PTR(t, S_S2) + off;
    double *restrict vmax = c->amsgrad ? (double *)PTR(t, S_S3) + off : NULL;
    const double b1 = c->b1, b2 = c->b2, c1 = 1.0 - b1, c2 = 1.0 - b2, l2 = c->per[t * PER + P_L2];
    const double lr_t = c->scratch[2 * t], eps_t = c->scratch[2 * t + 1], decay = c->per[t * PER + P_DECAY];
    const uint64_t all_ones = ~(uint64_t)0;
    double ones;
    memcpy(&ones, &all_ones, sizeof ones);
    const int fused = 0, ams = c->amsgrad, has_decay = decay == decay, has_l2 = l2 == l2;
    ADAM_DISPATCH(double, no_fma, sqrt, ones)
}

static void adam_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    const adam_ctx *c = (const adam_ctx *)ctx;
    float wbuf[CHUNK], gbuf[CHUNK], mbuf[CHUNK], vbuf[CHUNK], xbuf[CHUNK];
    int wt = dt_w(dt), st = dt_s(dt);
    float *restrict w = load_f(PTR(t, S_W), wt, off, len, wbuf);
    const float *restrict g = load_f(PTR(t, S_G), dt_g(dt), off, len, gbuf);
    float *restrict m = load_f(PTR(t, S_S1), st, off, len, mbuf);
    float *restrict v = load_f(PTR(t, S_S2), st, off, len, vbuf);
    float *restrict vmax = c->amsgrad ? load_f(PTR(t, S_S3), st, off, len, xbuf) : NULL;
    const double l2_d = c->per[t * PER + P_L2];
    const float b1 = (float)c->b1, b2 = (float)c->b2, c1 = 1.0f - b1, c2 = 1.0f - b2, l2 = (float)l2_d;
    const float lr_t = (float)c->scratch[2 * t], eps_t = (float)c->scratch[2 * t + 1];
    const double decay_d = c->per[t * PER + P_DECAY];
    /* The all-ones NaN read through a volatile: with a NaN constant in sight, GCC's partial
     * redundancy elimination splits amsgrad's maximum into a NaN path and the rest, and the loops
     * that update in double (the avx2 profile) no longer vectorize. The values are the same. */
    volatile uint32_t ones_bits = 0xffffffffu;
    const float decay = (float)decay_d, ones = float_of(ones_bits);
    const int fused = c->fused, ams = c->amsgrad, has_decay = decay_d == decay_d, has_l2 = l2_d == l2_d;
    ADAM_DISPATCH(float, fmaf, sqrtf, ones)
    store_f(PTR(t, S_S1), st, off, len, m);
    store_f(PTR(t, S_S2), st, off, len, v);
    if (c->amsgrad) store_f(PTR(t, S_S3), st, off, len, vmax);
    store_f(PTR(t, S_W), wt, off, len, w);
}

/* b1, b2, eps: the group's values (rounded to float32 here for float32 tensors); scratch: 2*count
 * doubles for lr_t and eps_t. The beta powers have the compute type. */
int pc_adam(int64_t count, const int64_t *rows, const double *per, double *scratch, double b1, double b2,
            double eps, int fused, int amsgrad, int nthreads) {
    adam_ctx c = {rows, per, scratch, b1, b2, fused, amsgrad};
    for (int64_t t = 0; t < count; t++) {
        void *p1 = (void *)(intptr_t)rows[t * ROW + S_POW1], *p2 = (void *)(intptr_t)rows[t * ROW + S_POW2];
        double lr = per[t * PER + P_LR];
        if (dt_w(rows[t * ROW + S_DT]) == DT_F64) {
            double root = sqrt(1.0 - *(double *)p2);
            scratch[2 * t] = lr * (root / (1.0 - *(double *)p1));
            scratch[2 * t + 1] = eps * root;
        } else {
            float root = sqrtf(1.0f - *(float *)p2);
            /* lr is float32 already, unless Paddle's LR tensor is float64 (a float64 first
             * parameter): the product is then rounded to float64 and float32, as in the torch form */
            scratch[2 * t] = (float)(lr * (double)(root / (1.0f - *(float *)p1)));
            scratch[2 * t + 1] = (float)eps * root;
        }
    }
    for_all(&c, adam_f64, adam_f32, rows, count, nthreads, GRAIN_ADAM);
    for (int64_t t = 0; t < count; t++) {
        void *p1 = (void *)(intptr_t)rows[t * ROW + S_POW1], *p2 = (void *)(intptr_t)rows[t * ROW + S_POW2];
        if (dt_w(rows[t * ROW + S_DT]) == DT_F64) {
            *(double *)p1 = *(double *)p1 * b1;
            *(double *)p2 = *(double *)p2 * b2;
        } else {
            *(float *)p1 = *(float *)p1 * (float)b1;
            *(float *)p2 = *(float *)p2 * (float)b2;
        }
    }
    return 0;
}

/* ================================================================================================
 * The rest of paddle.optimizer (Paddle's Eigen CPU kernels): Adagrad, RMSProp, Adamax, Adadelta,
 * RAdam, NAdam, ASGD, Rprop (and Lamb, after the sums of squares below). Every operation is
 * rounded in the compute type (float32 for float32/bfloat16/float16 values, float64 for float64),
 * in the order of the torch forms in paddle_compat/optimizer/. The float32 loops take their square
 * roots as Eigen's packets do (eigen_sqrt_f32), so they run in phases over the block: the
 * elementwise part into local arrays, the roots, the rest (Adagrad's float32 loop, the cheapest,
 * takes its whole packets' roots in registers instead, eigen_sqrt8, in one pass).
 * ============================================================================================== */
typedef struct {
    const int64_t *rows;
    const double *per;
    const double *scratch; /* per tensor: the scalars of the step (pc_*'s prologue), SCRATCH each */
    double h[4];           /* the group's hyper-parameters (float32 values: Paddle's attributes) */
    int flag;
    void *buf;           /* Lamb's directions */
    const int64_t *offs; /* per tensor, the byte offset of its direction in buf */
} family_ctx;

#define SCRATCH 8

/* Room for SCRATCH scalars per tensor (free it), or NULL. */
static double *per_tensor_scalars(int64_t count) {
    return malloc((size_t)(count > 0 ? count : 1) * SCRATCH * sizeof(double));
}

/* The per-tensor prologue of the optimizers with three one-element powers (RAdam, NAdam): for each
 * tensor, f64 or f32 (by its value's dtype) reads and advances the powers (the row's two, and pow3's:
 * per tensor, the third's address) and writes the tensor's scalars; h: the hyper-parameters, as given.
 * Returns the scalars (count rows of SCRATCH; the caller frees them), NULL when out of memory. */
typedef void (*powers_fn)(void *p1, void *p2, void *p3, double *s, const double *h);

static double *three_powers(int64_t count, const int64_t *rows, const int64_t *pow3, powers_fn f64, powers_fn f32,
                            const double *h) {
    double *scratch = per_tensor_scalars(count);
    if (!scratch) return NULL;
    for (int64_t t = 0; t < count; t++) {
        powers_fn f = dt_w(rows[t * ROW + S_DT]) == DT_F64 ? f64 : f32;
        f(ROW_PTR(rows, t, S_POW1), ROW_PTR(rows, t, S_POW2), (void *)(intptr_t)pow3[t], scratch + t * SCRATCH, h);
    }
    return scratch;
}
/* Elements per pass of the float32 loops: their phases (and a fused L2's gradient) keep every
 * operand in the L1 cache (512 measured the same; the whole BLOCK, up to 2x slower). */
#define SUB 1024

/* Eigen's float32 sqrt of 8 lanes: the CPU's rsqrtps refined by one Newton step,
 * x*(r*(1.5 - (r*r)*(0.5*x))), 0 for zero and subnormal inputs. */
#if defined(__AVX__)
static inline __m256 eigen_sqrt8(__m256 x) {
    const __m256 r = _mm256_rsqrt_ps(x), zero = _mm256_setzero_ps();
    const __m256 t = _mm256_sub_ps(_mm256_set1_ps(1.5f), _mm256_mul_ps(_mm256_mul_ps(r, r), _mm256_mul_ps(x, _mm256_set1_ps(0.5f))));
    const __m256 tiny = _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(FLT_MIN), _CMP_LT_OQ), _mm256_cmp_ps(x, zero, _CMP_GE_OQ));
    return _mm256_blendv_ps(_mm256_mul_ps(x, _mm256_mul_ps(r, t)), zero, tiny);
}
#endif

/* eigen_sqrt8, in place, on x[0, len) of a tensor whose first `fast` elements here lie in its whole
 * 8-lane packets; the elements past the packets take the correctly rounded root (so do all, where
 * there is no rsqrtps: the torch forms' root then). Without AVX, or for a last partial group, the
 * approximations are taken four lanes at a time (a partial group padded), as rsqrtps computes
 * them, and refined by the same Newton step written lane by lane. */
static void eigen_sqrt_f32(float *restrict x, int64_t len, int64_t fast) {
    fast = fast < 0 ? 0 : fast > len ? len : fast;
    int64_t i = 0;
#if defined(__AVX__)
    for (; i + 8 <= fast; i += 8) _mm256_storeu_ps(x + i, eigen_sqrt8(_mm256_loadu_ps(x + i)));
#endif
#if defined(__SSE__)
    float r[SUB];
    int64_t j = i;
    for (; j + 4 <= fast; j += 4) _mm_storeu_ps(r + j, _mm_rsqrt_ps(_mm_loadu_ps(x + j)));
    if (j < fast) {
        float pad[4] = {1.0f, 1.0f, 1.0f, 1.0f};
        memcpy(pad, x + j, (size_t)(fast - j) * sizeof(float));
        _mm_storeu_ps(pad, _mm_rsqrt_ps(_mm_loadu_ps(pad)));
        memcpy(r + j, pad, (size_t)(fast - j) * sizeof(float));
    }
    for (; i < fast; i++) {
        float xi = x[i], ri = r[i];
        float t = 1.5f - (ri * ri) * (xi * 0.5f);
        float root = xi * (ri * t);
        x[i] = (xi < FLT_MIN && xi >= 0.0f) ? 0.0f : root;
    }
#else
    fast = 0;
#endif
    for (i = fast; i < len; i++) x[i] = sqrtf(x[i]);
}

/* Elements of tensor t before `off` + the returned count lie in its whole 8-lane packets. */
static inline int64_t packet_elements(const int64_t *rows, int64_t t, int64_t off) {
    return (rows[t * ROW + S_N] / 8) * 8 - off;
}

/* The gradient with the fused L2 decay, g + w*l2 in float32, into buf (g itself without). */
static const float *with_l2(const float *restrict g, const float *restrict w, double l2_d, int64_t len,
                            float *restrict buf) {
    if (l2_d != l2_d) return g;
    const float l2 = (float)l2_d;
    for (int64_t i = 0; i < len; i++) buf[i] = g[i] + w[i] * l2;
    return buf;
}

/* A float32 loop over [off, off+len) as passes of at most SUB elements. */
static void in_passes(loop_fn f, const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    for (int64_t o = 0; o < len; o += SUB) f(ctx, t, off + o, len - o < SUB ? len - o : SUB, dt);
}

/* The float32 loops' operands (`self`: the loop, run in passes of SUB elements): w and g (g with
 * its fused L2), lr, and `fast` (eigen_sqrt_f32). */
#define FAMILY_F32_OPERANDS(self)                                                                  \
    if (len > SUB) {                                                                               \
        in_passes(self, ctx, t, off, len, dt);                                                     \
        return;                                                                                    \
    }                                                                                              \
    const family_ctx *c = (const family_ctx *)ctx;                                                 \
    const int wt = dt_w(dt), st = dt_s(dt);                                                        \
    float wbuf[SUB], gbuf[SUB], lbuf[SUB];                                                         \
    float *restrict w = load_f(PTR(t, S_W), wt, off, len, wbuf);                                   \
    const float *restrict g = with_l2(load_f(PTR(t, S_G), dt_g(dt), off, len, gbuf), w,            \
                                      c->per[t * PER + P_L2], len, lbuf);                          \
    const float lr = (float)c->per[t * PER + P_LR];                                                \
    const int64_t fast = packet_elements(c->rows, t, off);                                         \
    (void)st; (void)lr; (void)fast;

#define FAMILY_F64_OPERANDS                                                                        \
    const family_ctx *c = (const family_ctx *)ctx;                                                 \
    double *restrict w = (double *)PTR(t, S_W) + off;                                              \
    const double *restrict g = (const double *)PTR(t, S_G) + off;                                  \
    const double lr = c->per[t * PER + P_LR], l2 = c->per[t * PER + P_L2];                         \
    const int has_l2 = l2 == l2;                                                                   \
    (void)dt; (void)lr;
#define G64(i) (has_l2 ? g[i] + w[i] * l2 : g[i])

/* --- Adagrad: m = m + g*g;  w = w - (g*lr)/(sqrt(m) + eps) ------------------------------------- */
static void adagrad_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F64_OPERANDS
    double *restrict m = (double *)PTR(t, S_S1) + off;
    const double eps = c->h[0];
    for (int64_t i = 0; i < len; i++) {
        double gi = G64(i), mi = m[i] + gi * gi;
        m[i] = mi;
        w[i] = w[i] - (gi * lr) / (sqrt(mi) + eps);
    }
}

static void adagrad_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F32_OPERANDS(adagrad_f32)
    float mbuf[SUB], den[SUB];
    float *restrict m = load_f(PTR(t, S_S1), st, off, len, mbuf);
    const float eps = (float)c->h[0];
    int64_t i = 0;
#if defined(__AVX__)
    /* The whole packets in one pass, the roots in registers: Adagrad's update is the family's
     * cheapest, and the phases below (three passes over L1) cost it 10% at 10M parameters. */
    const __m256 lr8 = _mm256_set1_ps(lr), eps8 = _mm256_set1_ps(eps);
    for (; i + 8 <= fast && i + 8 <= len; i += 8) {
        const __m256 gi = _mm256_loadu_ps(g + i);
        const __m256 mi = _mm256_add_ps(_mm256_loadu_ps(m + i), _mm256_mul_ps(gi, gi));
        _mm256_storeu_ps(m + i, mi);
        const __m256 step = _mm256_div_ps(_mm256_mul_ps(gi, lr8), _mm256_add_ps(eigen_sqrt8(mi), eps8));
        _mm256_storeu_ps(w + i, _mm256_sub_ps(_mm256_loadu_ps(w + i), step));
    }
#endif
    for (int64_t k = i; k < len; k++) {
        float mk = m[k] + g[k] * g[k];
        m[k] = mk;
        den[k] = mk;
    }
    eigen_sqrt_f32(den + i, len - i, fast - i);
    for (int64_t k = i; k < len; k++) w[k] = w[k] - (g[k] * lr) / (den[k] + eps);
    store_f(PTR(t, S_S1), st, off, len, m);
    store_f(PTR(t, S_W), wt, off, len, w);
}

int pc_adagrad(int64_t count, const int64_t *rows, const double *per, double eps, int nthreads) {
    family_ctx c = {rows, per, NULL, {eps, 0, 0, 0}, 0, NULL, NULL};
    for_all(&c, adagrad_f64, adagrad_f32, rows, count, nthreads, GRAIN_ADAM);
    return 0;
}

/* --- RMSProp (states: momentum, mean_square, mean_grad when centered) ---------------------------
 *   ms = ms*rho + (g*(1-rho))*g;  centered: mg = mg*rho + g*(1-rho), den = sqrt((ms - mg*mg) + eps)
 *   else den = sqrt(ms + eps);  mom = mom*mu + (g*lr)/den;  w = w - mom */
static void rmsprop_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F64_OPERANDS
    double *restrict mom = (double *)PTR(t, S_S1) + off, *restrict ms = (double *)PTR(t, S_S2) + off;
    double *restrict mg = c->flag ? (double *)PTR(t, S_S3) + off : NULL;
    const double rho = c->h[0], eps = c->h[1], mu = c->h[2], keep = 1.0 - rho;
    for (int64_t i = 0; i < len; i++) {
        double gi = G64(i), msi = ms[i] * rho + (gi * keep) * gi, den;
        ms[i] = msi;
        if (mg) {
            double mgi = mg[i] * rho + gi * keep;
            mg[i] = mgi;
            den = (msi - mgi * mgi) + eps;
        } else {
            den = msi + eps;
        }
        double momi = mom[i] * mu + (gi * lr) / sqrt(den);
        mom[i] = momi;
        w[i] = w[i] - momi;
    }
}

static void rmsprop_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F32_OPERANDS(rmsprop_f32)
    float b1[SUB], b2[SUB], b3[SUB], den[SUB];
    float *restrict mom = load_f(PTR(t, S_S1), st, off, len, b1);
    float *restrict ms = load_f(PTR(t, S_S2), st, off, len, b2);
    float *restrict mg = c->flag ? load_f(PTR(t, S_S3), st, off, len, b3) : NULL;
    const float rho = (float)c->h[0], eps = (float)c->h[1], mu = (float)c->h[2], keep = 1.0f - rho;
    if (mg) {
        for (int64_t i = 0; i < len; i++) {
            float gi = g[i], msi = ms[i] * rho + (gi * keep) * gi, mgi = mg[i] * rho + gi * keep;
            ms[i] = msi;
            mg[i] = mgi;
            den[i] = (msi - mgi * mgi) + eps;
        }
    } else {
        for (int64_t i = 0; i < len; i++) {
            float gi = g[i], msi = ms[i] * rho + (gi * keep) * gi;
            ms[i] = msi;
            den[i] = msi + eps;
        }
    }
    eigen_sqrt_f32(den, len, fast);
    for (int64_t i = 0; i < len; i++) {
        float momi = mom[i] * mu + (g[i] * lr) / den[i];
        mom[i] = momi;
        w[i] = w[i] - momi;
    }
    store_f(PTR(t, S_S1), st, off, len, mom);
    store_f(PTR(t, S_S2), st, off, len, ms);
    if (mg) store_f(PTR(t, S_S3), st, off, len, mg);
    store_f(PTR(t, S_W), wt, off, len, w);
}

int pc_rmsprop(int64_t count, const int64_t *rows, const double *per, double rho, double eps, double mu,
               int centered, int nthreads) {
    family_ctx c = {rows, per, NULL, {rho, eps, mu, 0}, centered, NULL, NULL};
    for_all(&c, rmsprop_f64, rmsprop_f32, rows, count, nthreads, GRAIN_ADAM);
    return 0;
}

/* --- Adamax (states: moment, inf_norm; the beta1 power, advanced by the caller) -----------------
 *   m = m*b1 + g*(1-b1);  u = inf*b2 + eps;  inf = |g| < u ? u : |g| (NaN: |g|)
 *   w = w - (m/inf)*lr_t,  lr_t = lr/(1 - b1^t) (per tensor, lr unrounded) */
static void adamax_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F64_OPERANDS
    double *restrict m = (double *)PTR(t, S_S1) + off, *restrict inf = (double *)PTR(t, S_S2) + off;
    const double b1 = c->h[0], b2 = c->h[1], eps = c->h[2], keep = 1.0 - b1, lr_t = c->scratch[t * SCRATCH];
    for (int64_t i = 0; i < len; i++) {
        double gi = G64(i), mi = m[i] * b1 + gi * keep, ui = inf[i] * b2 + eps, ai = fabs(gi);
        ui = ai < ui ? ui : ai;
        m[i] = mi;
        inf[i] = ui;
        w[i] = w[i] - (mi / ui) * lr_t;
    }
}

static void adamax_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F32_OPERANDS(adamax_f32)
    float b1buf[SUB], b2buf[SUB];
    float *restrict m = load_f(PTR(t, S_S1), st, off, len, b1buf);
    float *restrict inf = load_f(PTR(t, S_S2), st, off, len, b2buf);
    const float b1 = (float)c->h[0], b2 = (float)c->h[1], eps = (float)c->h[2], keep = 1.0f - b1;
    const float lr_t = (float)c->scratch[t * SCRATCH];
    for (int64_t i = 0; i < len; i++) {
        float gi = g[i], mi = m[i] * b1 + gi * keep, ui = inf[i] * b2 + eps, ai = fabsf(gi);
        ui = ai < ui ? ui : ai;
        m[i] = mi;
        inf[i] = ui;
        w[i] = w[i] - (mi / ui) * lr_t;
    }
    store_f(PTR(t, S_S1), st, off, len, m);
    store_f(PTR(t, S_S2), st, off, len, inf);
    store_f(PTR(t, S_W), wt, off, len, w);
}

int pc_adamax(int64_t count, const int64_t *rows, const double *per, double b1, double b2, double eps,
              int nthreads) {
    double *scratch = per_tensor_scalars(count);
    if (!scratch) return 1;
    for (int64_t t = 0; t < count; t++) {
        const void *pow1 = ROW_PTR(rows, t, S_POW1);
        double lr = per[t * PER + P_LR];
        if (dt_w(rows[t * ROW + S_DT]) == DT_F64)
            scratch[t * SCRATCH] = lr / (1.0 - *(const double *)pow1);
        else
            scratch[t * SCRATCH] = (float)(lr / (double)(1.0f - *(const float *)pow1));
    }
    family_ctx c = {rows, per, scratch, {b1, b2, eps, 0}, 0, NULL, NULL};
    for_all(&c, adamax_f64, adamax_f32, rows, count, nthreads, GRAIN_ADAM);
    free(scratch);
    return 0;
}

/* --- Adadelta (states: avg_squared_grad, avg_squared_update) -------------------------------------
 *   asg = asg*rho + (g*g)*(1-rho);  u = -((sqrt(asu + eps)/sqrt(asg + eps))*g)
 *   w = w + u*lr;  asu = asu*rho + (u*u)*(1-rho) */
static void adadelta_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F64_OPERANDS
    double *restrict asg = (double *)PTR(t, S_S1) + off, *restrict asu = (double *)PTR(t, S_S2) + off;
    const double rho = c->h[0], eps = c->h[1], keep = 1.0 - rho;
    for (int64_t i = 0; i < len; i++) {
        double gi = G64(i), asgi = asg[i] * rho + (gi * gi) * keep;
        asg[i] = asgi;
        double u = -((sqrt(asu[i] + eps) / sqrt(asgi + eps)) * gi);
        w[i] = w[i] + u * lr;
        asu[i] = asu[i] * rho + (u * u) * keep;
    }
}

static void adadelta_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F32_OPERANDS(adadelta_f32)
    float b1[SUB], b2[SUB], up[SUB], den[SUB];
    float *restrict asg = load_f(PTR(t, S_S1), st, off, len, b1);
    float *restrict asu = load_f(PTR(t, S_S2), st, off, len, b2);
    const float rho = (float)c->h[0], eps = (float)c->h[1], keep = 1.0f - rho;
    for (int64_t i = 0; i < len; i++) {
        float asgi = asg[i] * rho + (g[i] * g[i]) * keep;
        asg[i] = asgi;
        up[i] = asu[i] + eps;
        den[i] = asgi + eps;
    }
    eigen_sqrt_f32(up, len, fast);
    eigen_sqrt_f32(den, len, fast);
    for (int64_t i = 0; i < len; i++) {
        float u = -((up[i] / den[i]) * g[i]);
        w[i] = w[i] + u * lr;
        asu[i] = asu[i] * rho + (u * u) * keep;
    }
    store_f(PTR(t, S_S1), st, off, len, asg);
    store_f(PTR(t, S_S2), st, off, len, asu);
    store_f(PTR(t, S_W), wt, off, len, w);
}

int pc_adadelta(int64_t count, const int64_t *rows, const double *per, double rho, double eps, int nthreads) {
    family_ctx c = {rows, per, NULL, {rho, eps, 0, 0}, 0, NULL, NULL};
    for_all(&c, adadelta_f64, adadelta_f32, rows, count, nthreads, GRAIN_ADAM);
    return 0;
}

/* Adam's moments as Paddle's Eigen kernels write them (RAdam, NAdam, Lamb): the operands m1 and
 * m2 (states 1 and 2), the group's b1, b2 and eps; then, for element i, m1i = m1*b1 + g*(1-b1)
 * and m2i = m2*b2 + (g*(1-b2))*g, stored. */
#define ADAM_MOMENTS_F64                                                                           \
    double *restrict m1 = (double *)PTR(t, S_S1) + off, *restrict m2 = (double *)PTR(t, S_S2) + off; \
    const double b1 = c->h[0], b2 = c->h[1], eps = c->h[2], k1 = 1.0 - b1, k2 = 1.0 - b2;
#define ADAM_MOMENTS_F32                                                                           \
    float m1buf[SUB], m2buf[SUB];                                                                  \
    float *restrict m1 = load_f(PTR(t, S_S1), st, off, len, m1buf);                                \
    float *restrict m2 = load_f(PTR(t, S_S2), st, off, len, m2buf);                                \
    const float b1 = (float)c->h[0], b2 = (float)c->h[1], eps = (float)c->h[2];                    \
    const float k1 = 1.0f - b1, k2 = 1.0f - b2;
#define ADAM_MOMENTS(T, i, gi)                                                                     \
    const T m1i = m1[i] * b1 + gi * k1, m2i = m2[i] * b2 + (gi * k2) * gi;                         \
    m1[i] = m1i;                                                                                   \
    m2[i] = m2i;

/* --- RAdam (states: moment1, moment2; the powers beta1_pow, beta2_pow and rho, advanced here) -----
 *   m1 = m1*b1 + g*(1-b1);  m2 = m2*b2 + (g*(1-b2))*g;  s = (m1/(1 - b1^t))*lr
 *   when rho_t > 5: s = (s*r_t)*(sqrt(1 - b2^t)/(sqrt(m2) + eps));  w = w - s
 * The per-tensor scalars are the torch form's prologue; the root of the constant 1 - b2^t is
 * Eigen's too (fast in the packets, exact on the tail). */
enum { RA_C1, RA_RT, RA_ROOT_FAST, RA_ROOT_EXACT, RA_RECT };

static void radam_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F64_OPERANDS
    ADAM_MOMENTS_F64
    const double *s = c->scratch + t * SCRATCH;
    const double c1 = s[RA_C1], r_t = s[RA_RT], root = s[RA_ROOT_EXACT];
    const int rect = s[RA_RECT] != 0.0;
    for (int64_t i = 0; i < len; i++) {
        double gi = G64(i);
        ADAM_MOMENTS(double, i, gi)
        double step = (m1i / c1) * lr;
        if (rect) step = (step * r_t) * (root / (sqrt(m2i) + eps));
        w[i] = w[i] - step;
    }
}

static void radam_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F32_OPERANDS(radam_f32)
    float step[SUB], den[SUB];
    ADAM_MOMENTS_F32
    const double *s = c->scratch + t * SCRATCH;
    const float c1 = (float)s[RA_C1], r_t = (float)s[RA_RT];
    const float root_fast = (float)s[RA_ROOT_FAST], root_exact = (float)s[RA_ROOT_EXACT];
    for (int64_t i = 0; i < len; i++) {
        float gi = g[i];
        ADAM_MOMENTS(float, i, gi)
        step[i] = (m1i / c1) * lr;
        den[i] = m2i;
    }
    if (s[RA_RECT] != 0.0) {
        eigen_sqrt_f32(den, len, fast);
        for (int64_t i = 0; i < len; i++) {
            float root = i < fast ? root_fast : root_exact;
            step[i] = (step[i] * r_t) * (root / (den[i] + eps));
        }
    }
    for (int64_t i = 0; i < len; i++) w[i] = w[i] - step[i];
    store_f(PTR(t, S_S1), st, off, len, m1);
    store_f(PTR(t, S_S2), st, off, len, m2);
    store_f(PTR(t, S_W), wt, off, len, w);
}

/* h: b1, b2 (RAdam's powers: beta1_pow, beta2_pow, rho) */
static void radam_powers_f64(void *p1, void *p2, void *p3, double *s, const double *h) {
    const double b1 = h[0], b2 = h[1];
    double rho_inf = 2.0 / (1.0 - b2) - 1.0;
    double b1p = *(double *)p1 * b1, b2p = *(double *)p2 * b2;
    double rho = ((*(double *)p3 * (b2 - b2p)) + b2p) / (1.0 - b2p), rho_t = rho_inf - 2.0 * rho;
    s[RA_C1] = 1.0 - b1p;
    s[RA_RECT] = rho_t > 5.0;
    s[RA_RT] = sqrt((((rho_t - 4.0) * (rho_t - 2.0)) * rho_inf) / (((rho_inf - 4.0) * (rho_inf - 2.0)) * rho_t));
    s[RA_ROOT_FAST] = s[RA_ROOT_EXACT] = sqrt(1.0 - b2p);
    *(double *)p1 = b1p;
    *(double *)p2 = b2p;
    *(double *)p3 = rho;
}

static void radam_powers_f32(void *p1, void *p2, void *p3, double *s, const double *h) {
    const float fb1 = (float)h[0], fb2 = (float)h[1];
    float rho_inf = 2.0f / (1.0f - fb2) - 1.0f;
    float b1p = *(float *)p1 * fb1, b2p = *(float *)p2 * fb2;
    float rho = ((*(float *)p3 * (fb2 - b2p)) + b2p) / (1.0f - b2p), rho_t = rho_inf - 2.0f * rho;
    float c2[1] = {1.0f - b2p};
    s[RA_C1] = 1.0f - b1p;
    s[RA_RECT] = rho_t > 5.0f;
    s[RA_RT] = sqrtf((((rho_t - 4.0f) * (rho_t - 2.0f)) * rho_inf) / (((rho_inf - 4.0f) * (rho_inf - 2.0f)) * rho_t));
    s[RA_ROOT_EXACT] = sqrtf(c2[0]);
    eigen_sqrt_f32(c2, 1, 1);
    s[RA_ROOT_FAST] = c2[0];
    *(float *)p1 = b1p;
    *(float *)p2 = b2p;
    *(float *)p3 = rho;
}

/* pow3: per tensor, the third power's address (rho). */
int pc_radam(int64_t count, const int64_t *rows, const double *per, const int64_t *pow3, double b1, double b2,
             double eps, int nthreads) {
    const double h[2] = {b1, b2};
    double *scratch = three_powers(count, rows, pow3, radam_powers_f64, radam_powers_f32, h);
    if (!scratch) return 1;
    family_ctx c = {rows, per, scratch, {b1, b2, eps, 0}, 0, NULL, NULL};
    for_all(&c, radam_f64, radam_f32, rows, count, nthreads, GRAIN_ADAM);
    free(scratch);
    return 0;
}

/* --- NAdam (states: moment1, moment2; the powers momentum_decay_pow, beta2_pow, mu_product) ------
 *   m1, m2 as RAdam's;  h = (m1*mu_next)/(1 - mu_product_next) + (g*(1 - mu_t))/(1 - mu_product)
 *   w = w - (h*lr)/(sqrt(m2/(1 - b2^t)) + eps) */
enum { NA_MU_NEXT, NA_C_NEXT, NA_K_T, NA_C_PROD, NA_C2 };

static void nadam_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F64_OPERANDS
    ADAM_MOMENTS_F64
    const double *s = c->scratch + t * SCRATCH;
    const double mu_next = s[NA_MU_NEXT], c_next = s[NA_C_NEXT], k_t = s[NA_K_T], c_prod = s[NA_C_PROD];
    const double c2 = s[NA_C2];
    for (int64_t i = 0; i < len; i++) {
        double gi = G64(i);
        ADAM_MOMENTS(double, i, gi)
        double hat = (m1i * mu_next) / c_next + (gi * k_t) / c_prod;
        w[i] = w[i] - (hat * lr) / (sqrt(m2i / c2) + eps);
    }
}

static void nadam_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F32_OPERANDS(nadam_f32)
    float hat[SUB], den[SUB];
    ADAM_MOMENTS_F32
    const double *s = c->scratch + t * SCRATCH;
    const float mu_next = (float)s[NA_MU_NEXT], c_next = (float)s[NA_C_NEXT], k_t = (float)s[NA_K_T];
    const float c_prod = (float)s[NA_C_PROD], c2 = (float)s[NA_C2];
    for (int64_t i = 0; i < len; i++) {
        float gi = g[i];
        ADAM_MOMENTS(float, i, gi)
        hat[i] = (m1i * mu_next) / c_next + (gi * k_t) / c_prod;
        den[i] = m2i / c2;
    }
    eigen_sqrt_f32(den, len, fast);
    for (int64_t i = 0; i < len; i++) w[i] = w[i] - (hat[i] * lr) / (den[i] + eps);
    store_f(PTR(t, S_S1), st, off, len, m1);
    store_f(PTR(t, S_S2), st, off, len, m2);
    store_f(PTR(t, S_W), wt, off, len, w);
}

/* The torch form's prologue in T (POW: the C library's pow of T), into s; the powers advanced. */
#define NADAM_SCALARS(T, POW, b1, b2, md, decay)                                                   \
    do {                                                                                           \
        T decay_pow = *(T *)p1 * decay, b2p = *(T *)p2 * b2;                                       \
        T half = (T)0.5 * POW(decay_pow, md);                                                      \
        T mu_t = b1 * ((T)1 - half), mu_next = b1 * ((T)1 - half * POW(decay, md));               \
        T mu_product = *(T *)p3 * mu_t, mu_product_next = mu_product * mu_next;                    \
        s[NA_MU_NEXT] = mu_next;                                                                   \
        s[NA_C_NEXT] = (T)1 - mu_product_next;                                                     \
        s[NA_K_T] = (T)1 - mu_t;                                                                   \
        s[NA_C_PROD] = (T)1 - mu_product;                                                          \
        s[NA_C2] = (T)1 - b2p;                                                                     \
        *(T *)p1 = decay_pow;                                                                      \
        *(T *)p2 = b2p;                                                                            \
        *(T *)p3 = mu_product;                                                                     \
    } while (0)

/* h: b1, b2, md, decay (NAdam's powers: momentum_decay_pow, beta2_pow, mu_product) */
static void nadam_powers_f64(void *p1, void *p2, void *p3, double *s, const double *h) {
    NADAM_SCALARS(double, pow, h[0], h[1], h[2], h[3]);
}

static void nadam_powers_f32(void *p1, void *p2, void *p3, double *s, const double *h) {
    const float fb1 = (float)h[0], fb2 = (float)h[1], fmd = (float)h[2], fdecay = (float)h[3];
    NADAM_SCALARS(float, powf, fb1, fb2, fmd, fdecay);
}

/* pow3: per tensor, the third power's address (mu_product); decay: the momentum schedule's base. */
int pc_nadam(int64_t count, const int64_t *rows, const double *per, const int64_t *pow3, double b1, double b2,
             double eps, double md, double decay, int nthreads) {
    const double h[4] = {b1, b2, md, decay};
    double *scratch = three_powers(count, rows, pow3, nadam_powers_f64, nadam_powers_f32, h);
    if (!scratch) return 1;
    family_ctx c = {rows, per, scratch, {b1, b2, eps, 0}, 0, NULL, NULL};
    for_all(&c, nadam_f64, nadam_f32, rows, count, nthreads, GRAIN_ADAM);
    free(scratch);
    return 0;
}

/* --- ASGD (states: d, and y, the last batch_num gradients, [batch_num, n]; the update count m) ----
 *   i = m % batch_num, m = m + 1 (per tensor, here);  d = (d - y[i]) + g;  y[i] = g
 *   w = w - d*lr_t,  lr_t = lr/min(m, batch_num) (lr unrounded) */
enum { AS_SLICE, AS_LR };

static void asgd_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F64_OPERANDS
    const double *s = c->scratch + t * SCRATCH;
    double *restrict d = (double *)PTR(t, S_S1) + off;
    double *restrict y = (double *)PTR(t, S_S2) + (int64_t)s[AS_SLICE] * c->rows[t * ROW + S_N] + off;
    const double lr_t = s[AS_LR];
    for (int64_t i = 0; i < len; i++) {
        double gi = G64(i), di = (d[i] - y[i]) + gi;
        d[i] = di;
        y[i] = gi;
        w[i] = w[i] - di * lr_t;
    }
}

static void asgd_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F32_OPERANDS(asgd_f32)
    const double *s = c->scratch + t * SCRATCH;
    const int64_t y_off = (int64_t)s[AS_SLICE] * c->rows[t * ROW + S_N] + off;
    float dbuf[SUB], ybuf[SUB];
    float *restrict d = load_f(PTR(t, S_S1), st, off, len, dbuf);
    float *restrict y = load_f(PTR(t, S_S2), st, y_off, len, ybuf);
    const float lr_t = (float)s[AS_LR];
    for (int64_t i = 0; i < len; i++) {
        float gi = g[i], di = (d[i] - y[i]) + gi;
        d[i] = di;
        y[i] = gi;
        w[i] = w[i] - di * lr_t;
    }
    store_f(PTR(t, S_S1), st, off, len, d);
    store_f(PTR(t, S_S2), st, y_off, len, y);
    store_f(PTR(t, S_W), wt, off, len, w);
}

/* The counts m are int64 (S_POW1); batch_num >= 1. */
int pc_asgd(int64_t count, const int64_t *rows, const double *per, int64_t batch_num, int nthreads) {
    double *scratch = per_tensor_scalars(count);
    if (!scratch) return 1;
    for (int64_t t = 0; t < count; t++) {
        int64_t *m = (int64_t *)ROW_PTR(rows, t, S_POW1);
        double *s = scratch + t * SCRATCH, lr = per[t * PER + P_LR];
        s[AS_SLICE] = (double)(*m % batch_num);
        *m += 1;
        int64_t seen = *m < batch_num ? *m : batch_num;
        if (dt_w(rows[t * ROW + S_DT]) == DT_F64)
            s[AS_LR] = lr / (double)seen;
        else
            s[AS_LR] = (float)(lr / (double)(float)seen);
    }
    family_ctx c = {rows, per, scratch, {0, 0, 0, 0}, 0, NULL, NULL};
    for_all(&c, asgd_f64, asgd_f32, rows, count, nthreads, GRAIN_MOMENTUM);
    free(scratch);
    return 0;
}

/* --- Rprop (states: prevs, learning_rates, in the value's dtype: float32 or float64 here) ---------
 *   p = g*prev;  eta = p > 0 ? eta_plus : p < 0 ? eta_minus : 1;  prev = p < 0 ? 0 : g
 *   rate = clamp(rate*eta, lo, hi) (NaN kept);  w = w - sign(prev)*rate (sign(NaN) = 0) */
#define RPROP_LOOP(T)                                                                              \
    for (int64_t i = 0; i < len; i++) {                                                            \
        T gi = G(i), prod = gi * prev[i];                                                          \
        T eta = prod > 0 ? eta_plus : (T)1;                                                        \
        eta = prod < 0 ? eta_minus : eta;                                                          \
        T pi = prod < 0 ? (T)0 : gi;                                                               \
        T ri = rate[i] * eta;                                                                      \
        ri = ri < lo ? lo : ri; /* NaN stays */                                                    \
        ri = ri > hi ? hi : ri;                                                                    \
        T sign = pi > 0 ? (T)1 : (T)0;                                                             \
        sign = pi < 0 ? (T)-1 : sign;                                                              \
        prev[i] = pi;                                                                              \
        rate[i] = ri;                                                                              \
        w[i] = w[i] - sign * ri;                                                                   \
    }

static void rprop_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F64_OPERANDS
    double *restrict prev = (double *)PTR(t, S_S1) + off, *restrict rate = (double *)PTR(t, S_S2) + off;
    const double lo = c->h[0], hi = c->h[1], eta_minus = c->h[2], eta_plus = c->h[3];
#define G(i) G64(i)
    RPROP_LOOP(double)
#undef G
}

static void rprop_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F32_OPERANDS(rprop_f32)
    float *restrict prev = (float *)PTR(t, S_S1) + off, *restrict rate = (float *)PTR(t, S_S2) + off;
    const float lo = (float)c->h[0], hi = (float)c->h[1], eta_minus = (float)c->h[2], eta_plus = (float)c->h[3];
#define G(i) g[i]
    RPROP_LOOP(float)
#undef G
    store_f(PTR(t, S_W), wt, off, len, w);
}

/* lo, hi, eta_minus, eta_plus: rounded as the torch form rounds them (each row's dtype rounds again). */
int pc_rprop(int64_t count, const int64_t *rows, const double *per, double lo, double hi, double eta_minus,
             double eta_plus, int nthreads) {
    family_ctx c = {rows, per, NULL, {lo, hi, eta_minus, eta_plus}, 0, NULL, NULL};
    for_all(&c, rprop_f64, rprop_f32, rows, count, nthreads, GRAIN_MOMENTUM);
    return 0;
}

/* ================================================================================================
 * Sum of squares in the order of Paddle's CPU reduction (Eigen, AVX packets of 32 bytes: 8 float32
 * or 4 float64 lanes): leaves of at most 1024 packets, each summed into two packet accumulators
 * taken in turn (an odd last packet goes to the first), the two added, the packet folded, the
 * scalar tail added left to right before it; above 1024 packets the range is halved at a packet
 * boundary and the halves' sums added. Squares are rounded in the input's dtype.
 * ============================================================================================== */
#define LEAF_PACKETS 1024

/* FOLD: the packet's lanes summed, after its upper half was added to its lower half */
#define FOLD8(h) ((h[0] + h[2]) + (h[1] + h[3]))
#define FOLD4(h) (h[0] + h[1])

#define DEFINE_SUMSQ(NAME, T, LANES, FOLD)                                                         \
    static T NAME##_leaf(const T *restrict x, int64_t first, int64_t num) {                        \
        T acc0[LANES] = {0}, acc1[LANES] = {0};                                                    \
        int64_t packets = num / LANES, pairs = num / (2 * LANES);                                  \
        const T *p = x + first;                                                                    \
        for (int64_t k = 0; k < pairs; k++, p += 2 * LANES)                                        \
            for (int l = 0; l < LANES; l++) {                                                      \
                acc0[l] = acc0[l] + p[l] * p[l];                                                   \
                acc1[l] = acc1[l] + p[LANES + l] * p[LANES + l];                                   \
            }                                                                                      \
        if (packets % 2) {                                                                         \
            for (int l = 0; l < LANES; l++) acc0[l] = acc0[l] + p[l] * p[l];                       \
            p += LANES;                                                                            \
        }                                                                                          \
        T half[LANES / 2];                                                                         \
        for (int l = 0; l < LANES / 2; l++)                                                        \
            half[l] = (acc0[l] + acc1[l]) + (acc0[LANES / 2 + l] + acc1[LANES / 2 + l]);           \
        T folded = FOLD(half);                                                                     \
        T tail = 0;                                                                                \
        for (int64_t k = packets * LANES; k < num; k++, p++) tail = tail + p[0] * p[0];           \
        return tail + folded;                                                                      \
    }                                                                                              \
    static T NAME(const T *restrict x, int64_t first, int64_t num) {                               \
        if (num <= LANES * LEAF_PACKETS) return NAME##_leaf(x, first, num);                        \
        int64_t half = (num + 1) / 2;                                                              \
        int64_t split = LANES * ((first + half + LANES - 1) / LANES);                              \
        int64_t num_left = split - first < num ? split - first : num;                              \
        T left = NAME(x, first, num_left);                                                         \
        if (num_left == num) return left;                                                          \
        return left + NAME(x, split, num - num_left);                                                   \
    }

DEFINE_SUMSQ(sumsq_f32, float, 8, FOLD8)
DEFINE_SUMSQ(sumsq_f64, double, 4, FOLD4)

/* --- Lamb (states: moment1, moment2; the beta powers, advanced here) -----------------------------
 *   m1, m2 as RAdam's;  dir = (m1/(1 - b1^t))/(sqrt(m2/(1 - b2^t)) + eps) + w*decay (exact sqrt)
 *   ratio = |w|/|dir| (Eigen's sums of squares, exact roots) when adapting and both are > 0, else 1
 *   w = w - dir*rate,  rate = lr*ratio (lr unrounded)
 * The trust ratio needs a tensor's two norms between its two passes: the tensors go in groups whose
 * directions fit the caller's buffer, each group in three steps (the directions over the threads,
 * the norms, the updates over the threads), so a step of many small tensors starts few threads. */
enum { LA_C1, LA_C2, LA_RATE };
#define LA_DIR(T, t) ((T *)((char *)c->buf + c->offs[t]))

static void lamb_direction_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F64_OPERANDS
    ADAM_MOMENTS_F64
    double *restrict dir = LA_DIR(double, t) + off;
    const double *s = c->scratch + t * SCRATCH;
    const double c1 = s[LA_C1], c2 = s[LA_C2], decay = c->per[t * PER + P_DECAY];
    for (int64_t i = 0; i < len; i++) {
        double gi = G64(i);
        ADAM_MOMENTS(double, i, gi)
        dir[i] = (m1i / c1) / (sqrt(m2i / c2) + eps) + w[i] * decay;
    }
}

static void lamb_direction_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    FAMILY_F32_OPERANDS(lamb_direction_f32)
    ADAM_MOMENTS_F32
    float *restrict dir = LA_DIR(float, t) + off;
    const double *s = c->scratch + t * SCRATCH;
    const float c1 = (float)s[LA_C1], c2 = (float)s[LA_C2], decay = (float)c->per[t * PER + P_DECAY];
    for (int64_t i = 0; i < len; i++) {
        float gi = g[i];
        ADAM_MOMENTS(float, i, gi)
        dir[i] = (m1i / c1) / (sqrtf(m2i / c2) + eps) + w[i] * decay;
    }
    store_f(PTR(t, S_S1), st, off, len, m1);
    store_f(PTR(t, S_S2), st, off, len, m2);
}

static void lamb_update_f64(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    const family_ctx *c = (const family_ctx *)ctx;
    double *restrict w = (double *)PTR(t, S_W) + off;
    const double *restrict dir = LA_DIR(double, t) + off;
    const double rate = c->scratch[t * SCRATCH + LA_RATE];
    (void)dt;
    for (int64_t i = 0; i < len; i++) w[i] = w[i] - dir[i] * rate;
}

static void lamb_update_f32(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    const family_ctx *c = (const family_ctx *)ctx;
    float *restrict w = (float *)PTR(t, S_W) + off; /* float32 values only (see pc_lamb) */
    const float *restrict dir = LA_DIR(float, t) + off;
    const float rate = (float)c->scratch[t * SCRATCH + LA_RATE];
    (void)dt;
    for (int64_t i = 0; i < len; i++) w[i] = w[i] - dir[i] * rate;
}

/* Values float32 (the parameter or its master weight) or float64; buf: buf_bytes of room, at least
 * the largest tensor's direction in its dtype; always_adapt: adapt without decay too. */
int pc_lamb(int64_t count, const int64_t *rows, const double *per, void *buf, int64_t buf_bytes, double b1,
            double b2, double eps, int always_adapt, int nthreads) {
    double *scalars = per_tensor_scalars(count);
    int64_t *offs = malloc((size_t)(count > 0 ? count : 1) * sizeof(int64_t));
    int64_t *quiet = malloc((size_t)(count > 0 ? count : 1) * ROW * sizeof(int64_t));
    if (!scalars || !offs || !quiet) {
        free(scalars);
        free(offs);
        free(quiet);
        return 1;
    }
    /* the rows of the first pass leave the parameters alone: their master weights change later */
    memcpy(quiet, rows, (size_t)count * ROW * sizeof(int64_t));
    for (int64_t t = 0; t < count; t++) {
        int64_t *dt = &quiet[t * ROW + S_DT];
        *dt = (*dt & ~((int64_t)DT_MASK << DT_P)) | ((int64_t)DT_NONE << DT_P);
        void *p1 = ROW_PTR(rows, t, S_POW1), *p2 = ROW_PTR(rows, t, S_POW2);
        double *s = scalars + t * SCRATCH;
        if (dt_w(rows[t * ROW + S_DT]) == DT_F64) {
            s[LA_C1] = 1.0 - *(double *)p1;
            s[LA_C2] = 1.0 - *(double *)p2;
        } else {
            s[LA_C1] = 1.0f - *(float *)p1;
            s[LA_C2] = 1.0f - *(float *)p2;
        }
    }
    for (int64_t t0 = 0, t1; t0 < count; t0 = t1) {
        int64_t used = 0;
        for (t1 = t0; t1 < count; t1++) {
            int64_t size = rows[t1 * ROW + S_N] * (dt_w(rows[t1 * ROW + S_DT]) == DT_F64 ? 8 : 4);
            if (t1 > t0 && used + size > buf_bytes) break;
            offs[t1] = used;
            used += (size + 63) & ~(int64_t)63; /* whole cache lines: no line shared between tensors */
        }
        family_ctx c = {quiet + t0 * ROW, per + t0 * PER, scalars + t0 * SCRATCH, {b1, b2, eps, 0}, 0, buf,
                        offs + t0};
        for_all(&c, lamb_direction_f64, lamb_direction_f32, quiet + t0 * ROW, t1 - t0, nthreads, GRAIN_ADAM);
        for (int64_t t = t0; t < t1; t++) {
            const void *w = ROW_PTR(rows, t, S_W), *dir = (const char *)buf + offs[t];
            const int64_t n = rows[t * ROW + S_N];
            const double lr = per[t * PER + P_LR];
            const int adapt = per[t * PER + P_DECAY] != 0.0 || always_adapt;
            double *s = scalars + t * SCRATCH;
            if (dt_w(rows[t * ROW + S_DT]) == DT_F64) {
                double p_norm = sqrt(sumsq_f64((const double *)w, 0, n));
                double d_norm = sqrt(sumsq_f64((const double *)dir, 0, n));
                s[LA_RATE] = lr * (adapt && p_norm > 0.0 && d_norm > 0.0 ? p_norm / d_norm : 1.0);
            } else {
                float p_norm = sqrtf(sumsq_f32((const float *)w, 0, n));
                float d_norm = sqrtf(sumsq_f32((const float *)dir, 0, n));
                float ratio = adapt && p_norm > 0.0f && d_norm > 0.0f ? p_norm / d_norm : 1.0f;
                s[LA_RATE] = (float)(lr * (double)ratio);
            }
        }
        c.rows = rows + t0 * ROW;
        for_all(&c, lamb_update_f64, lamb_update_f32, rows + t0 * ROW, t1 - t0, nthreads, GRAIN_SGD);
    }
    for (int64_t t = 0; t < count; t++) {
        void *p1 = ROW_PTR(rows, t, S_POW1), *p2 = ROW_PTR(rows, t, S_POW2);
        if (dt_w(rows[t * ROW + S_DT]) == DT_F64) {
            *(double *)p1 = *(double *)p1 * b1;
            *(double *)p2 = *(double *)p2 * b2;
        } else {
            *(float *)p1 = *(float *)p1 * (float)b1;
            *(float *)p2 = *(float *)p2 * (float)b2;
        }
    }
    free(scalars);
    free(offs);
    free(quiet);
    return 0;
}

/* rows: count x (n, pointer, dtype); out: one sum per tensor (a float32 sum is exact as a double). */
int pc_sumsq(int64_t count, const int64_t *rows, double *out) {
    for (int64_t t = 0; t < count; t++) {
        const void *x = (const void *)(intptr_t)rows[3 * t + 1];
        int64_t n = rows[3 * t];
        out[t] = rows[3 * t + 2] == DT_F64 ? sumsq_f64((const double *)x, 0, n) : (double)sumsq_f32((const float *)x, 0, n);
    }
    return 0;
}

/* ================================================================================================
 * The largest magnitude of each tensor, NaN where it holds one, for the GradScaler's read-only
 * check of the grads on its fused path (paddle_compat/amp/unscale.py). Rows are ROW wide, with
 * only the count, the data (S_W) and its dtype (the value's, in S_DT; the rest NO_DTYPE).
 * Magnitudes are compared as the integers their bits are, which order them as numbers in every
 * float format, NaNs above infinity: one load, one mask and one integer max per element.
 * ============================================================================================== */
typedef struct {
    const int64_t *rows;
    int64_t count;
    uint64_t *part; /* per thread, per tensor: the largest magnitude's bits seen */
} peaks_ctx;

/* Into m: the largest magnitude's bits among x[off, off+len), values stored as the unsigned type T
 * (mask: every bit but the sign). */
#define MAX_MAGNITUDE(T, mask)                                                                     \
    do {                                                                                           \
        const T *u = (const T *)x + off;                                                           \
        T p = 0;                                                                                   \
        for (int64_t i = 0; i < len; i++) {                                                        \
            T a = (T)(u[i] & (mask));                                                              \
            p = a > p ? a : p;                                                                     \
        }                                                                                          \
        m = p;                                                                                     \
    } while (0)

static void peaks_loop(const void *ctx, int64_t t, int64_t off, int64_t len, int64_t dt) {
    const peaks_ctx *c = (const peaks_ctx *)ctx;
    const void *x = PTR(t, S_W);
    uint64_t m = 0;
    if (dt_w(dt) == DT_F64) MAX_MAGNITUDE(uint64_t, 0x7fffffffffffffffull);
    else if (dt_w(dt) == DT_F32) MAX_MAGNITUDE(uint32_t, 0x7fffffffu);
    else MAX_MAGNITUDE(uint16_t, 0x7fffu);
#ifdef _OPENMP
    uint64_t *mine = c->part + (int64_t)omp_get_thread_num() * c->count + t;
#else
    uint64_t *mine = c->part + t;
#endif
    *mine = m > *mine ? m : *mine;
}

/* Paddle's flag (check_finite_and_unscale), read only: *bad = 1 when T(c(x) * inv) is inf or NaN
 * for some element x, c the compute type (float32 for float32/bfloat16/float16 values, float64 for
 * float64), T back to x's dtype. Rounding is monotone, so each tensor's largest magnitude decides.
 * inv: a float32 value. 1 when out of memory. */
int pc_nonfinite(int64_t count, const int64_t *rows, double inv, int nthreads, int *bad) {
    nthreads = nthreads < 1 ? 1 : nthreads;
    peaks_ctx c = {rows, count, calloc((size_t)(nthreads * (count > 0 ? count : 1)), sizeof(uint64_t))};
    if (!c.part) return 1;
    for_all(&c, peaks_loop, peaks_loop, rows, count, nthreads, GRAIN_SGD);
    *bad = 0;
    for (int64_t t = 0; t < count && !*bad; t++) {
        uint64_t m = 0;
        for (int k = 0; k < nthreads; k++) m = c.part[k * count + t] > m ? c.part[k * count + t] : m;
        int dt = dt_w(rows[t * ROW + S_DT]);
        if (dt == DT_F64) {
            double peak;
            memcpy(&peak, &m, sizeof(double));
            *bad = !(peak * inv <= DBL_MAX);
        } else {
            float peak = dt == DT_F32 ? float_of((uint32_t)m)
                       : dt == DT_BF16 ? float_from_bf16((uint16_t)m) : float_from_f16((uint16_t)m);
            float v = peak * (float)inv;
            *bad = dt == DT_F32 ? !(v <= FLT_MAX)
                 : dt == DT_BF16 ? (bf16_from_float(v) & 0x7fffu) >= 0x7f80u : (f16_from_float(v) & 0x7fffu) >= 0x7c00u;
        }
    }
    free(c.part);
    return 0;
}

/* The CPU's approximate reciprocal square roots (rsqrtps) of n floats: what Eigen's float32 sqrt
 * in Paddle's CPU kernels refines (paddle_compat/optimizer/_eigen.py); the approximation is the CPU
 * maker's, so only the instruction itself gives Paddle's bits. -1 where there is no such instruction. */
int pc_rsqrt(int64_t n, const float *x, float *out) {
#if defined(__SSE__)
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(out + i, _mm_rsqrt_ps(_mm_loadu_ps(x + i)));
    for (; i < n; i++) out[i] = _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(x[i])));
    return 0;
#else
    (void)n; (void)x; (void)out;
    return -1;
#endif
}

/* Known answers the build must reproduce: a fused multiply-add that is not two roundings, a
 * correctly rounded square root, the conversions' rounding; and probes of the flags: each answer
 * differs when the compiler contracted a*b + c into an FMA, assumed no NaNs, reassociated a sum or
 * replaced a division by a product, or when subnormals are flushed to zero (as the startup code of
 * a -ffast-math build makes the whole process do). 0 when all hold, else the failed check. */
int pc_selftest(void) {
    volatile float a = 1.0f + 0x1p-12f, c = -(1.0f + 0x1p-11f);
    if (fmaf(a, a, c) != 0x1p-24f) return 1; /* a*a + c is 0 in two roundings */
    volatile float two = 2.0f;
    if (sqrtf(two) != 0x1.6a09e6p+0f) return 2;
    volatile float x = 1.0f + 0x1p-8f; /* a tie in bfloat16: to even */
    if (bf16_from_float(x) != 0x3f80u || f16_from_float(65520.0f) != 0x7c00u) return 3;
    if (float_from_f16(0x0001u) != 0x1p-24f || float_from_f16(f16_from_float(0x1p-24f)) != 0x1p-24f) return 4;
    float av = a, cv = c;
    if (av * av + cv != 0.0f) return 5; /* contracted into an FMA: 2**-24 */
    volatile float vnan = NAN;
    float n = vnan;
    if (!(n != n) || n == n) return 6; /* folded away under -ffinite-math-only */
    volatile float vtiny = 0x1p-140f, vhalf = 0.5f;
    float tiny = vtiny, half = vhalf;
    if (tiny * half != 0x1p-141f) return 7; /* 0 with flush-to-zero / denormals-are-zero */
    volatile float vbig = 0x1p30f, vone = 1.0f;
    float big = vbig, one = vone;
    if ((one + big) - big != 0.0f) return 8; /* 1 when reassociated */
    volatile float vfive = 5.0f;
    float five = vfive;
    if (five / 3.0f != 0x1.aaaaaap+0f) return 9; /* 0x1.aaaaacp+0 times the rounded reciprocal */
    return 0;
}

/* The highest instruction-set level this CPU and its operating system run, as x86-64 psABI
 * levels: 4 (AVX-512), 3 (AVX2 and FMA) or 1; 0 on other architectures (they have one level). */
int pc_cpu_level(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    int v3 = __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
    int v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
    return v4 ? 4 : v3 ? 3 : 1;
#else
    return 0;
#endif
}

/* The version stamp: a hash of this file, given by setup.py (_native_build.stamp_flags) and checked
 * by the loader against the _native.c beside the Python side, so that a library left from an older
 * source (a pull without a reinstall) is refused; 0 for a build without it, refused too. */
#ifndef PC_SOURCE_STAMP
#define PC_SOURCE_STAMP 0
#endif
int64_t pc_source_stamp(void) { return PC_SOURCE_STAMP; }
