/* paddle_compat's compiled CPU kernels: the optimizers' updates and Paddle's CPU sum of squares.
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
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

enum dtype { DT_F32 = 0, DT_F64 = 1, DT_BF16 = 2, DT_F16 = 3, DT_NONE = 15 };
enum slot { S_N, S_W, S_G, S_P, S_S1, S_S2, S_S3, S_POW1, S_POW2, S_DT, ROW };
enum per { P_LR, P_DECAY, P_L2, PER = 4 }; /* P_DECAY, P_L2: NaN when absent */

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

static inline int dt_w(int64_t packed) { return (int)(packed & 15); }
static inline int dt_g(int64_t packed) { return (int)((packed >> 4) & 15); }
static inline int dt_p(int64_t packed) { return (int)((packed >> 8) & 15); }
static inline int dt_s(int64_t packed) { return (int)((packed >> 12) & 15); }
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
 *                            w = w + (m/(sqrt(v)+eps_t))*(-lr_t)
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
        T step = mi / (SQRT(vi) + eps_t);                                                          \
        w[i] = FUSED ? FMA(step, -lr_t, wi) : wi + step * -lr_t;                                   \
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
    const float decay = (float)decay_d, ones = float_of(0xffffffffu);
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

/* rows: count x (n, pointer, dtype); out: one sum per tensor (a float32 sum is exact as a double). */
int pc_sumsq(int64_t count, const int64_t *rows, double *out) {
    for (int64_t t = 0; t < count; t++) {
        const void *x = (const void *)(intptr_t)rows[3 * t + 1];
        int64_t n = rows[3 * t];
        out[t] = rows[3 * t + 2] == DT_F64 ? sumsq_f64((const double *)x, 0, n) : (double)sumsq_f32((const float *)x, 0, n);
    }
    return 0;
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
