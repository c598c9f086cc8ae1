// binary.metal — Backend.Binary (dst = a op b, a and b broadcast to dst's
// shape by stride-0 dimensions) on float32, float16 or bfloat16 (binary_f32,
// binary_f16, binary_bf16: float32 arithmetic, rounded once on store), and
// Backend.Where (dst = cond ≠ 0 ? a : b) over 32- or 16-bit data and
// conditions (where_x32, where_x16, where_x32_c16, where_x16_c16).
//
// Function constants:
//   0 binary_op       (uint): binary_*: the backend.BinaryOp value, one
//                             of the B_* op numbers of the prelude's
//                             forge_ops.h (generated from
//                             forge/backend/backend.go); each op is its
//                             own pipeline.
//   1 binary_flat     (bool): every view is one run (ndim == 1 after
//                             coalescing): element i is at i·stride (a
//                             contiguous view has stride 1, a broadcast
//                             scalar 0), no index decomposition.
//   2 where_cond_int  (bool): where_x32, where_x16: cond holds int32 (else
//                             float32; −0 counts as zero, NaN as non-zero).
//   3 binary_vec4     (bool): binary_*: binary_flat, dst contiguous, a and
//                             b each contiguous or a broadcast scalar, and
//                             every contiguous view's bound offset a
//                             multiple of 4 elements (the Go side checks):
//                             each thread moves 4 elements per step with
//                             one vector load per contiguous operand and
//                             one vector store (16 bytes for float32), the
//                             last n mod 4 elements by the scalar loop.
//                             Every element is computed as on the scalar
//                             path: the results are the same bits.
#include <metal_stdlib>
using namespace metal;

enum : uint { BINARY_MAX_DIMS = 8 };

// BinaryParams describes up to four views of one shape (coalesced by the Go
// side): view v's element i (row-major) is at Σ_d idx_d·strides[v][d] from
// its bound buffer offset. Binary binds (dst, a, b); Where (dst, cond, a, b).
struct BinaryParams {
    uint n;                                 // number of elements
    uint ndim;                              // 1 … BINARY_MAX_DIMS
    uint shape[BINARY_MAX_DIMS];
    int strides[4][BINARY_MAX_DIMS];
};

constant uint binary_op [[function_constant(0)]];
constant bool binary_flat [[function_constant(1)]];
constant bool where_cond_int [[function_constant(2)]];
constant bool binary_vec4 [[function_constant(3)]];

// binary_pow is a^b with the sign of a negative base raised to an integer
// power, and a^0 = 1 (even for NaN), as math.Pow.
static inline float binary_pow(float a, float b) {
    if (b == 0.0f) {
        return 1.0f;
    }
    if (b == 1.0f) {
        return a;
    }
    if (b == 2.0f) {
        return a * a;
    }
    if (a < 0.0f && b == trunc(b)) {
        float r = pow(-a, b);
        return fmod(fabs(b), 2.0f) == 1.0f ? -r : r;
    }
    return pow(a, b);
}

static inline float binary_apply(float a, float b) {
    switch (binary_op) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_POW: return binary_pow(a, b);
    // Maximum and Minimum propagate NaN (Go's max and min, PyTorch).
    case B_MAXIMUM: return isnan(a) ? a : (isnan(b) ? b : (a > b ? a : b));
    case B_MINIMUM: return isnan(a) ? a : (isnan(b) ? b : (a < b ? a : b));
    case B_EQ: return a == b ? 1.0f : 0.0f;
    case B_NE: return a != b ? 1.0f : 0.0f;
    case B_LT: return a < b ? 1.0f : 0.0f;
    case B_LE: return a <= b ? 1.0f : 0.0f;
    case B_GT: return a > b ? 1.0f : 0.0f;
    case B_GE: return a >= b ? 1.0f : 0.0f;
    default: return 0.0f;
    }
}

// binary_offset returns view v's element offset of flat index i.
static inline int binary_offset(constant BinaryParams& p, uint v, uint i) {
    if (binary_flat) {
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

// Storage types of binary_T: float32, float16 (half) and bfloat16 (bfloat),
// one dtype for dst, a and b. Loads widen to float32 (forge_widen, exact),
// the op runs in float32, the store rounds once (forge_narrow: the
// prelude, forge_half.h).

template <typename T>
kernel void binary_t(device T* dst [[buffer(0)]],
                     const device T* a [[buffer(1)]],
                     const device T* b [[buffer(2)]],
                     constant BinaryParams& p [[buffer(3)]],
                     uint gid [[thread_position_in_grid]],
                     uint gsize [[threads_per_grid]]) {
    uint start = 0;
    if (binary_vec4) {
        typedef vec<T, 4> T4;
        const bool a_vec = p.strides[1][0] != 0;
        const bool b_vec = p.strides[2][0] != 0;
        const float a0 = forge_widen(a[0]); // a broadcast scalar's value
        const float b0 = forge_widen(b[0]);
        const uint n4 = p.n / 4;
        for (uint i = gid; i < n4; i += gsize) {
            const T4 av = a_vec ? ((const device T4*)a)[i] : T4(T(0));
            const T4 bv = b_vec ? ((const device T4*)b)[i] : T4(T(0));
            T4 r;
            for (uint c = 0; c < 4; c++) {
                r[c] = forge_narrow<T>(binary_apply(a_vec ? forge_widen(av[c]) : a0, b_vec ? forge_widen(bv[c]) : b0));
            }
            ((device T4*)dst)[i] = r;
        }
        start = 4 * n4;
    }
    for (uint i = start + gid; i < p.n; i += gsize) {
        float av = forge_widen(a[binary_offset(p, 1, i)]);
        float bv = forge_widen(b[binary_offset(p, 2, i)]);
        dst[binary_offset(p, 0, i)] = forge_narrow<T>(binary_apply(av, bv));
    }
}

template [[host_name("binary_f32")]] [[kernel]] void binary_t<float>(device float*, const device float*, const device float*, constant BinaryParams&, uint, uint);
template [[host_name("binary_f16")]] [[kernel]] void binary_t<half>(device half*, const device half*, const device half*, constant BinaryParams&, uint, uint);
template [[host_name("binary_bf16")]] [[kernel]] void binary_t<bfloat>(device bfloat*, const device bfloat*, const device bfloat*, constant BinaryParams&, uint, uint);

// where_T_C moves data words of T (uint: float32/int32; ushort: float16/
// bfloat16) under a condition of words C: where_x32 (32-bit data and
// cond), where_x16 (16-bit data, 32-bit cond), where_x32_c16 and
// where_x16_c16 (a float16 or bfloat16 cond: non-zero unless ±0, so NaN
// counts as non-zero; where_cond_int is ignored).
static inline bool where_take(uint c) {
    return where_cond_int ? (as_type<int>(c) != 0) : (as_type<float>(c) != 0.0f);
}
static inline bool where_take(ushort c) { return (c & 0x7fffu) != 0u; }

template <typename T, typename C>
kernel void where_t(device T* dst [[buffer(0)]],
                    const device C* cond [[buffer(1)]],
                    const device T* a [[buffer(2)]],
                    const device T* b [[buffer(3)]],
                    constant BinaryParams& p [[buffer(4)]],
                    uint gid [[thread_position_in_grid]],
                    uint gsize [[threads_per_grid]]) {
    for (uint i = gid; i < p.n; i += gsize) {
        bool take_a = where_take(cond[binary_offset(p, 1, i)]);
        dst[binary_offset(p, 0, i)] = take_a ? a[binary_offset(p, 2, i)] : b[binary_offset(p, 3, i)];
    }
}

template [[host_name("where_x32")]] [[kernel]] void where_t<uint, uint>(device uint*, const device uint*, const device uint*, const device uint*, constant BinaryParams&, uint, uint);
template [[host_name("where_x16")]] [[kernel]] void where_t<ushort, uint>(device ushort*, const device uint*, const device ushort*, const device ushort*, constant BinaryParams&, uint, uint);
template [[host_name("where_x32_c16")]] [[kernel]] void where_t<uint, ushort>(device uint*, const device ushort*, const device uint*, const device uint*, constant BinaryParams&, uint, uint);
template [[host_name("where_x16_c16")]] [[kernel]] void where_t<ushort, ushort>(device ushort*, const device ushort*, const device ushort*, const device ushort*, constant BinaryParams&, uint, uint);
