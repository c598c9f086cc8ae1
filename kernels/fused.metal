// fused.metal — the fused kernels of the training step, contiguous:
// Backend.SwiGLU and SwiGLUBackward (float32, float16, bfloat16),
// Backend.SumSquares (float32, float16, bfloat16 src; float32 dst) and
// Backend.AdamW (float32).
//
// swiglu_f32, swiglu_backward_f32: elementwise (grid-stride loops). They
// reproduce the unfused composition on this backend bit for bit: silu(a)
// and the SiLU gradient are written exactly as unary_f32 / unary_grad_f32
// write them (unary.metal), and each product is rounded where Binary's Mul
// rounds it:
//   y  = silu(a)·b
//   db = g·silu(a),  da = ((g·b)·σ(a))·(1 + a·(1 − σ(a)))
// swiglu_f16, swiglu_bf16, swiglu_backward_f16, swiglu_backward_bf16: the
// same float32 arithmetic on 16-bit views (all of one dtype), widened
// exactly on load; y, da and db round once on store (the intermediates
// silu(a) and g·b stay float32, so these are more accurate than the
// unfused 16-bit composition, which rounds them to 16 bits).
//
// sum_squares_f32: Σ src² in two passes of fixed blocks. Pass 1 (constant
// ss_square): threadgroup k sums the squares of elements k·block …
// (k+1)·block − 1 into part[k]; pass 2 (ss_square false): one threadgroup
// sums the partials in order into dst. A single block writes dst directly.
// sum_squares_f16, sum_squares_bf16: pass 1 over a float16 / bfloat16 src
// (widened exactly; dst and the partials are float32), pass 2 is
// sum_squares_f32's.
// Sums are compensated (per-thread two-sums, a fixed butterfly across the
// lanes, the simdgroups in order through threadgroup memory), so the result
// is deterministic and within about an ulp of the CPU's float64 sum.
//
// adamw_f32: one AdamW update per element (backend.AdamWParams):
//   m ← β1·m + (1−β1)·g,  v ← β2·v + (1−β2)·g²,
//   w ← w·decay − step·m / (√v·ibc2 + eps)
// with decay = 1 − lr·wd, step = lr/(1−β1ᵗ), ibc2 = 1/√(1−β2ᵗ). The CPU
// computes each element in float64 and rounds each stored value once; here
// every coefficient arrives as a float pair (hi + lo, from the host's
// float64) and the arithmetic is float-float (error-free products with fma,
// two-sums, a corrected square root and quotient), rounded once per stored
// value, so the result matches the CPU's except at rare rounding ties.
// With the constant adamw_clipped (backend.GradClipper.AdamWClipped) it
// reads a clip state (optim.metal's grad_clip_f32) at buffer 5: nothing is
// written when state[2] (skip) is set, and each gradient element is
// state[1]·g rounded to float first (g itself when the coefficient is 1),
// as scaling the gradient in place would store it.
//
// Function constants:
//   0 ss_square (bool): sum_squares_f32: square the inputs (pass 1); else
//                       add them as they are (pass 2 over the partials).
//   1 adamw_clipped (bool): adamw_f32: scale by (and skip on) the clip
//                       state at buffer 5.
//   2 adamw_vec4 (bool): adamw_f32: w, grad, m and v are bound at 16-byte
//                       multiples (the Go side checks): each thread updates
//                       4 elements per step with float4 loads and stores,
//                       the last n mod 4 by the scalar loop; every element
//                       is computed as on the scalar path (the same bits).
#include <metal_stdlib>
using namespace metal;

enum : uint { FUSED_MAX_SIMDGROUPS = 32 };

struct FusedParams {
    uint n; // number of elements
};

constant bool ss_square [[function_constant(0)]];
constant bool adamw_clipped [[function_constant(1)]];
constant bool adamw_vec4 [[function_constant(2)]];

// Storage types of swiglu_* and sum_squares_*: loads widen to float32
// (forge_widen, exact); stores round once (forge_narrow: the prelude,
// forge_half.h).

// The SiLU forms of unary.metal (U_SILU), kept textually identical.
static inline float fused_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }
static inline float fused_silu(float x) { return x / (1.0f + exp(-x)); }
static inline float fused_silu_grad(float x, float g) {
    float s = fused_sigmoid(x);
    return g * s * (1.0f + x * (1.0f - s));
}

template <typename T>
kernel void swiglu_t(device T* y [[buffer(0)]],
                     const device T* a [[buffer(1)]],
                     const device T* b [[buffer(2)]],
                     constant FusedParams& p [[buffer(3)]],
                     uint gid [[thread_position_in_grid]],
                     uint gsize [[threads_per_grid]]) {
    for (uint i = gid; i < p.n; i += gsize) {
        float s = fused_silu(forge_widen(a[i]));
        y[i] = forge_narrow<T>(s * forge_widen(b[i]));
    }
}

template <typename T>
kernel void swiglu_backward_t(device T* da [[buffer(0)]],
                              device T* db [[buffer(1)]],
                              const device T* a [[buffer(2)]],
                              const device T* b [[buffer(3)]],
                              const device T* g [[buffer(4)]],
                              constant FusedParams& p [[buffer(5)]],
                              uint gid [[thread_position_in_grid]],
                              uint gsize [[threads_per_grid]]) {
    for (uint i = gid; i < p.n; i += gsize) {
        float x = forge_widen(a[i]);
        float gv = forge_widen(g[i]);
        float gb = gv * forge_widen(b[i]);
        float s = fused_silu(x);
        db[i] = forge_narrow<T>(gv * s);
        da[i] = forge_narrow<T>(fused_silu_grad(x, gb));
    }
}

template [[host_name("swiglu_f32")]] [[kernel]] void swiglu_t<float>(device float*, const device float*, const device float*, constant FusedParams&, uint, uint);
template [[host_name("swiglu_f16")]] [[kernel]] void swiglu_t<half>(device half*, const device half*, const device half*, constant FusedParams&, uint, uint);
template [[host_name("swiglu_bf16")]] [[kernel]] void swiglu_t<bfloat>(device bfloat*, const device bfloat*, const device bfloat*, constant FusedParams&, uint, uint);
template [[host_name("swiglu_backward_f32")]] [[kernel]] void swiglu_backward_t<float>(device float*, device float*, const device float*, const device float*, const device float*, constant FusedParams&, uint, uint);
template [[host_name("swiglu_backward_f16")]] [[kernel]] void swiglu_backward_t<half>(device half*, device half*, const device half*, const device half*, const device half*, constant FusedParams&, uint, uint);
template [[host_name("swiglu_backward_bf16")]] [[kernel]] void swiglu_backward_t<bfloat>(device bfloat*, device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, constant FusedParams&, uint, uint);

// ---------------------------------------------------------------------------
// SumSquares

struct SumSqParams {
    uint n;     // elements (pass 1) or partials (pass 2)
    uint block; // elements per threadgroup
};

struct FusedAcc {
    float s;
    float c;
};

static inline void fused_add(thread FusedAcc& a, float x) {
    float t = a.s + x;
    if (isfinite(t)) {
        a.c += fabs(a.s) >= fabs(x) ? (a.s - t) + x : (x - t) + a.s;
    }
    a.s = t;
}

// fused_simd combines the lanes' sums with a butterfly of two-sums; every
// lane ends with the same total. (s, c) travel as one 64-bit shuffle
// (simd_shuffle_xor takes integer types only).
static inline FusedAcc fused_simd(FusedAcc a) {
    for (ushort m = 16; m >= 1; m >>= 1) {
        float2 o = as_type<float2>(simd_shuffle_xor(as_type<uint2>(float2(a.s, a.c)), m));
        a.c += o.y;
        fused_add(a, o.x);
    }
    return a;
}

// sum_squares_t: src float (sum_squares_f32, both passes), half or bfloat
// (sum_squares_f16, sum_squares_bf16: pass 1 only); dst float32 always.
template <typename T>
kernel void sum_squares_t(device float* dst [[buffer(0)]],
                          const device T* src [[buffer(1)]],
                          constant SumSqParams& p [[buffer(2)]],
                          uint tg [[threadgroup_position_in_grid]],
                          uint tid [[thread_index_in_threadgroup]],
                          uint tsize [[threads_per_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]],
                          uint sg [[simdgroup_index_in_threadgroup]],
                          uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float ps[FUSED_MAX_SIMDGROUPS];
    threadgroup float pc[FUSED_MAX_SIMDGROUPS];

    const uint lo = tg * p.block;
    const uint hi = min(lo + p.block, p.n);
    FusedAcc a;
    a.s = 0.0f;
    a.c = 0.0f;
    for (uint i = lo + tid; i < hi; i += tsize) {
        float v = forge_widen(src[i]);
        if (ss_square) {
            float t = v * v;
            fused_add(a, t);
            if (isfinite(t)) {
                a.c += fma(v, v, -t); // the square's rounding error
            }
        } else {
            fused_add(a, v);
        }
    }
    a = fused_simd(a);
    if (nsg > 1) {
        if (lane == 0) {
            ps[sg] = a.s;
            pc[sg] = a.c;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        FusedAcc b;
        b.s = lane < nsg ? ps[lane] : 0.0f;
        b.c = lane < nsg ? pc[lane] : 0.0f;
        a = fused_simd(b);
    }
    if (tid == 0) {
        dst[tg] = isfinite(a.s) ? a.s + a.c : a.s;
    }
}

template [[host_name("sum_squares_f32")]] [[kernel]] void sum_squares_t<float>(device float*, const device float*, constant SumSqParams&, uint, uint, uint, uint, uint, uint);
template [[host_name("sum_squares_f16")]] [[kernel]] void sum_squares_t<half>(device float*, const device half*, constant SumSqParams&, uint, uint, uint, uint, uint, uint);
template [[host_name("sum_squares_bf16")]] [[kernel]] void sum_squares_t<bfloat>(device float*, const device bfloat*, constant SumSqParams&, uint, uint, uint, uint, uint, uint);

// ---------------------------------------------------------------------------
// AdamW

// AdamWParams: each coefficient as a float pair (.x + .y = the host's
// float64 value).
struct AdamWParams {
    uint n;
    uint pad;
    float2 b1;    // β1
    float2 c1;    // 1 − β1
    float2 b2;    // β2
    float2 c2;    // 1 − β2
    float2 ibc2;  // 1/√(1 − β2ᵗ)
    float2 eps;   // ε
    float2 decay; // 1 − lr·wd
    float2 step;  // lr/(1 − β1ᵗ)
};

// FF is an unevaluated float pair hi + lo.
struct FF {
    float hi;
    float lo;
};

static inline FF ff_two_sum(float a, float b) {
    FF r;
    r.hi = a + b;
    float bb = r.hi - a;
    r.lo = (a - (r.hi - bb)) + (b - bb);
    return r;
}

static inline FF ff_two_prod(float a, float b) {
    FF r;
    r.hi = a * b;
    r.lo = fma(a, b, -r.hi);
    return r;
}

// ff_mul is (c.x + c.y)·x as a pair.
static inline FF ff_mul(float2 c, float x) {
    FF r = ff_two_prod(c.x, x);
    r.lo = fma(c.y, x, r.lo);
    return r;
}

// ff_round rounds a pair to float once (non-finite hi passes through).
static inline float ff_round(FF a) { return isfinite(a.hi) ? a.hi + a.lo : a.hi; }

// ff_add_pairs is a + b for pairs.
static inline FF ff_add(FF a, FF b) {
    FF s = ff_two_sum(a.hi, b.hi);
    s.lo += a.lo + b.lo;
    return s;
}

// ff_norm renormalises a pair so that hi = fl(hi + lo).
static inline FF ff_norm(FF a) {
    if (!isfinite(a.hi)) {
        a.lo = 0.0f;
        return a;
    }
    return ff_two_sum(a.hi, a.lo);
}

// adamw_step updates one element: w, m and v in place from gradient g
// (coef·g when the clip coefficient is not 1).
static inline void adamw_step(thread float& w, float g, thread float& m, thread float& v, float coef,
                              constant AdamWParams& p) {
    if (coef != 1.0f) {
        g = coef * g;
    }

    // m ← β1·m + (1−β1)·g
    const float mi = ff_round(ff_add(ff_mul(p.b1, m), ff_mul(p.c1, g)));

    // v ← β2·v + (1−β2)·g², with g² = q.hi + q.lo exactly.
    FF q = ff_two_prod(g, g);
    FF cq = ff_two_prod(p.c2.x, q.hi);
    cq.lo = fma(p.c2.y, q.hi, fma(p.c2.x, q.lo, cq.lo));
    const float vi = ff_round(ff_add(ff_mul(p.b2, v), cq));
    m = mi;
    v = vi;

    // denom = √v·ibc2 + eps, √v = sh + sl.
    float sh = sqrt(vi);
    float sl = 0.0f;
    if (sh > 0.0f && isfinite(sh)) {
        sl = fma(-sh, sh, vi) / (2.0f * sh);
    }
    FF d = ff_two_prod(sh, p.ibc2.x);
    d.lo = fma(sh, p.ibc2.y, fma(sl, p.ibc2.x, d.lo));
    FF e;
    e.hi = p.eps.x;
    e.lo = p.eps.y;
    d = ff_norm(ff_add(d, e));

    // u = step·m/denom, the quotient corrected by its remainder.
    float qh = mi / d.hi;
    float ql = 0.0f;
    if (isfinite(qh) && d.hi != 0.0f) {
        ql = (fma(-qh, d.hi, mi) - qh * d.lo) / d.hi;
    }
    FF u = ff_two_prod(p.step.x, qh);
    u.lo = fma(p.step.y, qh, fma(p.step.x, ql, u.lo));

    // w ← w·decay − u
    FF wd = ff_mul(p.decay, w);
    u.hi = -u.hi;
    u.lo = -u.lo;
    w = ff_round(ff_add(wd, u));
}

kernel void adamw_f32(device float* w [[buffer(0)]],
                      const device float* grad [[buffer(1)]],
                      device float* m [[buffer(2)]],
                      device float* v [[buffer(3)]],
                      constant AdamWParams& p [[buffer(4)]],
                      const device float* state [[buffer(5)]],
                      uint gid [[thread_position_in_grid]],
                      uint gsize [[threads_per_grid]]) {
    float coef = 1.0f;
    if (adamw_clipped) {
        if (state[2] != 0.0f) {
            return; // a non-finite gradient norm: the step is skipped
        }
        coef = state[1];
    }
    uint start = 0;
    if (adamw_vec4) {
        for (uint i = gid; i < p.n / 4; i += gsize) {
            float4 w4 = ((device float4*)w)[i];
            const float4 g4 = ((const device float4*)grad)[i];
            float4 m4 = ((device float4*)m)[i];
            float4 v4 = ((device float4*)v)[i];
            for (uint c = 0; c < 4; c++) {
                float wc = w4[c];
                float mc = m4[c];
                float vc = v4[c];
                adamw_step(wc, g4[c], mc, vc, coef, p);
                w4[c] = wc;
                m4[c] = mc;
                v4[c] = vc;
            }
            ((device float4*)m)[i] = m4;
            ((device float4*)v)[i] = v4;
            ((device float4*)w)[i] = w4;
        }
        start = p.n / 4 * 4;
    }
    for (uint i = start + gid; i < p.n; i += gsize) {
        float wi = w[i];
        float mi = m[i];
        float vi = v[i];
        adamw_step(wi, grad[i], mi, vi, coef, p);
        m[i] = mi;
        v[i] = vi;
        w[i] = wi;
    }
}
