// unary.metal — Backend.Unary (dst = op(src), src broadcast to dst's shape)
// and Backend.UnaryGrad (dx = g·op'(x), with y = op(x)), on float32,
// float16 or bfloat16 views (one dtype per call: unary_f32, unary_f16,
// unary_bf16, unary_grad_*), computed in float32 and rounded once on store.
//
// Every backend.UnaryOp is its own pipeline: the op is a function constant,
// so the switch below folds to one case at pipeline creation.
//
// Function constants:
//   0 unary_op     (uint): the backend.UnaryOp value, one of the U_* op
//                          numbers of the prelude's forge_ops.h (generated
//                          from forge/backend/backend.go).
//   1 unary_flat   (bool): every view is one run (ndim == 1 after the Go side
//                          coalesced the dims): element i is at i·stride.
//   2 unary_have_y (bool): unary_grad_* only: y is bound; otherwise it is
//                          recomputed from x where the rule needs it.
//   3 unary_vec4   (bool): unary_flat, the output contiguous, every input
//                          contiguous or a broadcast scalar, and every
//                          contiguous view's bound offset a multiple of 4
//                          elements (the Go side checks): each thread
//                          moves 4 elements per step with vector loads and
//                          one vector store, the last n mod 4 elements by
//                          the scalar loop. Every element is computed as on
//                          the scalar path: the results are the same bits.
//
// Float32 arithmetic throughout. The CPU backend computes transcendental ops in
// float64 and rounds once; these are within a few ulp of that.
#include <metal_stdlib>
using namespace metal;

enum : uint { UNARY_MAX_DIMS = 8 };

// UnaryParams describes up to four views of one shape (coalesced by the Go
// side): view v's element i (row-major) is at Σ_d idx_d·strides[v][d] from
// its bound buffer offset. Unary binds (dst, src); UnaryGrad (dx, x, y, g).
struct UnaryParams {
    float a;                                // the op's scalar A
    float b;                                // the op's scalar B
    uint n;                                 // number of elements
    uint ndim;                              // 1 … UNARY_MAX_DIMS
    uint shape[UNARY_MAX_DIMS];
    int strides[4][UNARY_MAX_DIMS];
};

constant uint unary_op [[function_constant(0)]];
constant bool unary_flat [[function_constant(1)]];
constant bool unary_have_y [[function_constant(2)]];
constant bool unary_vec4 [[function_constant(3)]];

// Constants of the GELU rules.
#define GELU_K 0.7978845608028654f      // √(2/π)
#define GELU_C 0.044715f                // cubic coefficient of the tanh form
#define INV_SQRT2 0.7071067811865476f   // 1/√2
#define INV_SQRT2PI 0.3989422804014327f // 1/√(2π)

// unary_erfc is the complementary error function in float32 (Metal has no
// erf): erfc(z) = t·exp(−z² + P(t)) with t = 1/(1 + |z|/2) and P the
// degree-9 Chebyshev fit of Press et al. (fractional error < 1.2e-7), then
// erfc(−z) = 2 − erfc(z).
static inline float unary_erfc(float z) {
    float az = fabs(z);
    float t = 1.0f / (1.0f + 0.5f * az);
    float p = -0.82215223f + t * 0.17087277f;
    p = 1.48851587f + t * p;
    p = -1.13520398f + t * p;
    p = 0.27886807f + t * p;
    p = -0.18628806f + t * p;
    p = 0.09678418f + t * p;
    p = 0.37409196f + t * p;
    p = 1.00002368f + t * p;
    p = -1.26551223f + t * p;
    float r = t * exp(-az * az + p);
    return z >= 0.0f ? r : 2.0f - r;
}

// unary_pow is a^b with the sign of a negative base raised to an integer
// power, and a^0 = 1 (even for NaN), as math.Pow.
static inline float unary_pow(float a, float b) {
    if (b == 0.0f) {
        return 1.0f;
    }
    if (a < 0.0f && b == trunc(b)) {
        float r = pow(-a, b);
        return fmod(fabs(b), 2.0f) == 1.0f ? -r : r;
    }
    return pow(a, b);
}

static inline float unary_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

static inline float unary_apply(float x, float a, float b) {
    switch (unary_op) {
    case U_NEG: return -x;
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_RSQRT: return 1.0f / sqrt(x);
    case U_TANH: return tanh(x);
    case U_SIGMOID: return unary_sigmoid(x);
    case U_SILU: return x / (1.0f + exp(-x));
    case U_GELU_TANH: {
        // 0.5·x·(1+tanh u) = x·sigmoid(2u), without the cancellation in
        // 1 + tanh u for negative x.
        float u = GELU_K * (x + GELU_C * x * x * x);
        return x / (1.0f + exp(-2.0f * u));
    }
    case U_GELU_ERF: return 0.5f * x * unary_erfc(-x * INV_SQRT2);
    case U_RELU: return x < 0.0f ? 0.0f : x; // NaN and −0 pass through
    case U_ABS: return fabs(x);
    case U_POW_SCALAR:
        if (a == 1.0f) return x;
        if (a == 2.0f) return x * x;
        if (a == 3.0f) return x * x * x;
        if (a == -1.0f) return 1.0f / x;
        return unary_pow(x, a);
    case U_CLAMP: {
        float v = x; // NaN propagates; A > B gives B
        if (v < a) v = a;
        if (v > b) v = b;
        return v;
    }
    case U_AFFINE: return fma(a, x, b);
    case U_RPOW_SCALAR: return unary_pow(a, x);
    case U_RDIV_SCALAR: return a / x;
    case U_SQUARE: return x * x;
    case U_SIGN: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); // NaN gives 0
    case U_ROUND: return rint(x); // halves to even (the default rounding mode)
    default: return x;
    }
}

// unary_grad_apply is g·op'(x) given y = op(x).
static inline float unary_grad_apply(float x, float y, float g, float a, float b) {
    switch (unary_op) {
    case U_NEG: return -g;
    case U_EXP: return g * y;
    case U_LOG: return g / x;
    case U_SQRT: return g / (2.0f * y);
    case U_RSQRT: return -0.5f * g * y * y * y;
    case U_TANH: return g * (1.0f - y * y);
    case U_SIGMOID: return g * y * (1.0f - y);
    case U_SILU: {
        float s = unary_sigmoid(x);
        return g * s * (1.0f + x * (1.0f - s));
    }
    case U_GELU_TANH: {
        // y = x·σ(2u), u = k(x + c x³): y' = σ + 2x σ(1−σ) k(1 + 3c x²).
        float u = GELU_K * (x + GELU_C * x * x * x);
        float s = 1.0f / (1.0f + exp(-2.0f * u));
        return g * (s + 2.0f * x * s * (1.0f - s) * GELU_K * (1.0f + 3.0f * GELU_C * x * x));
    }
    case U_GELU_ERF: // Φ(x) + x φ(x)
        return g * (0.5f * unary_erfc(-x * INV_SQRT2) + x * INV_SQRT2PI * exp(-0.5f * x * x));
    case U_RELU: return x <= 0.0f ? 0.0f : g; // NaN passes the gradient
    case U_ABS: return x > 0.0f ? g : (x < 0.0f ? -g : 0.0f);
    case U_POW_SCALAR:
        if (a == 0.0f) return 0.0f;
        if (a == 1.0f) return g;
        if (a == 2.0f) return 2.0f * x * g;
        if (a == 3.0f) return 3.0f * x * x * g;
        return g * a * unary_pow(x, a - 1.0f);
    case U_CLAMP: return (a <= x && x <= b) ? g : 0.0f;
    case U_AFFINE: return a * g;
    case U_RPOW_SCALAR: // A^x ln A; 0 where A = 0 and x ≥ 0
        if (a == 0.0f && x >= 0.0f) return 0.0f;
        return g * y * log(a);
    case U_RDIV_SCALAR: return -a * g / (x * x);
    case U_SQUARE: return 2.0f * x * g;
    case U_SIGN: return 0.0f;
    case U_ROUND: return 0.0f;
    default: return 0.0f;
    }
}

// unary_offset returns view v's element offset of flat index i.
static inline int unary_offset(constant UnaryParams& p, uint v, uint i) {
    if (unary_flat) {
        return int(i) * p.strides[v][0];
    }
    int off = 0;
    uint r = i;
    for (int d = int(p.ndim) - 1; d >= 0; d--) {
        uint c = r % p.shape[d];
        r /= p.shape[d];
        off += int(c) * p.strides[v][d];
    }
    return off;
}

// Storage types: float32, float16 (half) and bfloat16 (bfloat). Loads widen
// to float32 (forge_widen, exact), the op runs in float32 and the store
// rounds once to the storage type (forge_narrow: the prelude,
// forge_half.h).

// unary_T and unary_grad_T are instantiated for float (unary_f32,
// unary_grad_f32), half (unary_f16, unary_grad_f16) and bfloat (unary_bf16,
// unary_grad_bf16); every view of one call has the one dtype.
//
// unary_load4 is the i-th 4 elements of view v of the vector loop: a
// vector load where the view is contiguous, its one element (a broadcast
// scalar, stride 0) 4 times otherwise.
template <typename T>
static inline vec<T, 4> unary_load4(const device T* x, constant UnaryParams& p, uint v, uint i) {
    return p.strides[v][0] != 0 ? ((const device vec<T, 4>*)x)[i] : vec<T, 4>(x[0]);
}

template <typename T>
kernel void unary_t(device T* dst [[buffer(0)]],
                    const device T* src [[buffer(1)]],
                    constant UnaryParams& p [[buffer(2)]],
                    uint gid [[thread_position_in_grid]],
                    uint gsize [[threads_per_grid]]) {
    uint start = 0;
    if (unary_vec4) {
        for (uint i = gid; i < p.n / 4; i += gsize) {
            const vec<T, 4> x = unary_load4(src, p, 1, i);
            vec<T, 4> r;
            for (uint c = 0; c < 4; c++) {
                r[c] = forge_narrow<T>(unary_apply(forge_widen(x[c]), p.a, p.b));
            }
            ((device vec<T, 4>*)dst)[i] = r;
        }
        start = p.n / 4 * 4;
    }
    for (uint i = start + gid; i < p.n; i += gsize) {
        float x = forge_widen(src[unary_offset(p, 1, i)]);
        dst[unary_offset(p, 0, i)] = forge_narrow<T>(unary_apply(x, p.a, p.b));
    }
}

template <typename T>
kernel void unary_grad_t(device T* dx [[buffer(0)]],
                         const device T* x [[buffer(1)]],
                         const device T* y [[buffer(2)]],
                         const device T* g [[buffer(3)]],
                         constant UnaryParams& p [[buffer(4)]],
                         uint gid [[thread_position_in_grid]],
                         uint gsize [[threads_per_grid]]) {
    uint start = 0;
    if (unary_vec4) {
        for (uint i = gid; i < p.n / 4; i += gsize) {
            const vec<T, 4> x4 = unary_load4(x, p, 1, i);
            const vec<T, 4> y4 = unary_have_y ? unary_load4(y, p, 2, i) : x4;
            const vec<T, 4> g4 = unary_load4(g, p, 3, i);
            vec<T, 4> r;
            for (uint c = 0; c < 4; c++) {
                const float xv = forge_widen(x4[c]);
                const float yv = unary_have_y ? forge_widen(y4[c]) : unary_apply(xv, p.a, p.b);
                r[c] = forge_narrow<T>(unary_grad_apply(xv, yv, forge_widen(g4[c]), p.a, p.b));
            }
            ((device vec<T, 4>*)dx)[i] = r;
        }
        start = p.n / 4 * 4;
    }
    for (uint i = start + gid; i < p.n; i += gsize) {
        float xv = forge_widen(x[unary_offset(p, 1, i)]);
        float yv = unary_have_y ? forge_widen(y[unary_offset(p, 2, i)]) : unary_apply(xv, p.a, p.b);
        float gv = forge_widen(g[unary_offset(p, 3, i)]);
        dx[unary_offset(p, 0, i)] = forge_narrow<T>(unary_grad_apply(xv, yv, gv, p.a, p.b));
    }
}

template [[host_name("unary_f32")]] [[kernel]] void unary_t<float>(device float*, const device float*, constant UnaryParams&, uint, uint);
template [[host_name("unary_f16")]] [[kernel]] void unary_t<half>(device half*, const device half*, constant UnaryParams&, uint, uint);
template [[host_name("unary_bf16")]] [[kernel]] void unary_t<bfloat>(device bfloat*, const device bfloat*, constant UnaryParams&, uint, uint);
template [[host_name("unary_grad_f32")]] [[kernel]] void unary_grad_t<float>(device float*, const device float*, const device float*, const device float*, constant UnaryParams&, uint, uint);
template [[host_name("unary_grad_f16")]] [[kernel]] void unary_grad_t<half>(device half*, const device half*, const device half*, const device half*, constant UnaryParams&, uint, uint);
template [[host_name("unary_grad_bf16")]] [[kernel]] void unary_grad_t<bfloat>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, constant UnaryParams&, uint, uint);
