// reduce.metal — Backend.Reduce: sum, max, min, argmax and argmin of a
// float32, float16 or bfloat16 view over its last nred dimensions.
//
// Kernels by (src, dst) dtype: reduce_f32 (float32 → float32 or int32),
// reduce_f16_f32 and reduce_bf16_f32 (16-bit src → float32 values or int32
// indices), reduce_f16 and reduce_bf16 (16-bit src → the src's dtype, sum,
// max and min only). 16-bit elements widen exactly on load and every
// reduction runs in float32 (the sum compensated as for float32); a 16-bit
// dst rounds the float32 result once on store (exact for max and min).
//
// One threadgroup per output (outputs numbered x-fastest over a 2-D grid of
// threadgroups, so that more than 65535 fit). Its threads walk the reduced extent with a
// stride of the threadgroup size (thread t takes elements t, t+T, …), then
// the simdgroups combine with simd_sum / simd_max / simd_min and the
// simdgroups' results meet in threadgroup memory, where the first
// simdgroup combines them the same way. The order of every operation is
// fixed by the threadgroup size, so results are deterministic.
//
// Max and Min propagate NaN; ArgMax and ArgMin report the first maximum
// (minimum), or the first NaN, as the CPU backend and PyTorch do. Indices
// are flat in the reduced extent (row-major over the reduced dims, which
// the Go side coalesces without reordering).
//
// Function constants:
//   0 reduce_op   (uint): backend.ReduceOp, one of the R_* op numbers of
//                         the prelude's forge_ops.h (generated from
//                         forge/backend/backend.go): R_SUM, R_MAX, R_MIN,
//                         R_ARGMAX, R_ARGMIN. dst holds values for sum,
//                         max and min (float32 bits in the 32-bit
//                         kernels), int32 indices for argmax and argmin
//                         (32-bit kernels only).
//   1 reduce_flat (bool): the reduced extent is one run (rdim == 1): its
//                         element j is at j·rstrides[0].
#include <metal_stdlib>
using namespace metal;

enum : uint { REDUCE_MAX_DIMS = 8, REDUCE_MAX_SIMDGROUPS = 32, REDUCE_NONE = 0xffffffffu };

// ReduceParams: the kept dims of src (kshape/kstrides, coalesced) index the
// outputs in row-major order; the reduced dims (rshape/rstrides) the
// reduced extent.
struct ReduceParams {
    uint nout;   // number of outputs (threadgroups)
    uint nr;     // reduced extent (≥ 1)
    uint kdim;   // 0 … REDUCE_MAX_DIMS
    uint rdim;   // 1 … REDUCE_MAX_DIMS
    uint kshape[REDUCE_MAX_DIMS];
    int kstrides[REDUCE_MAX_DIMS];
    uint rshape[REDUCE_MAX_DIMS];
    int rstrides[REDUCE_MAX_DIMS];
};

constant uint reduce_op [[function_constant(0)]];
constant bool reduce_flat [[function_constant(1)]];

// ReduceState is one thread's (or simdgroup's) partial result: the sum
// (with its running compensation) or the best value, its index for the arg
// ops, and whether a NaN was seen (then idx is the first NaN's index).
struct ReduceState {
    float v;
    float comp; // sum only: the rounding errors of v, added at the end
    uint idx;
    uint nan;
};

// reduce_two_sum adds b to a, returning the rounded sum and accumulating
// its rounding error into err (Fast2Sum on the larger operand). It is
// symmetric in a and b, so lanes that add the same pair agree bit for bit.
static inline float reduce_two_sum(float a, float b, thread float& err) {
    float t = a + b;
    if (isfinite(t)) {
        err += fabs(a) >= fabs(b) ? (a - t) + b : (b - t) + a;
    }
    return t;
}

static inline float reduce_xor(float v, ushort mask) {
    return as_type<float>(simd_shuffle_xor(as_type<uint>(v), mask));
}

static inline bool reduce_is_max() { return reduce_op == R_MAX || reduce_op == R_ARGMAX; }

// reduce_simd combines the states of the 32 lanes of a simdgroup; every
// lane gets the result. Lanes holding no element carry idx == REDUCE_NONE
// and the identity value.
static inline ReduceState reduce_simd(ReduceState s) {
    ReduceState r;
    if (reduce_op == R_SUM) {
        // A butterfly of compensated additions: every lane ends with the
        // same sum, and the rounding errors of the tree are kept too.
        float v = s.v;
        float comp = s.comp;
        for (ushort m = 16; m >= 1; m >>= 1) {
            float ov = reduce_xor(v, m);
            float oc = reduce_xor(comp, m);
            comp += oc;
            v = reduce_two_sum(v, ov, comp);
        }
        r.v = v;
        r.comp = comp;
        r.idx = 0;
        r.nan = 0;
        return r;
    }
    r.comp = 0.0f;
    r.nan = simd_max(s.nan);
    if (r.nan != 0) {
        r.v = NAN;
        r.idx = simd_min(s.nan != 0 ? s.idx : uint(REDUCE_NONE));
        return r;
    }
    r.v = reduce_is_max() ? simd_max(s.v) : simd_min(s.v);
    r.idx = simd_min((s.idx != REDUCE_NONE && s.v == r.v) ? s.idx : uint(REDUCE_NONE));
    return r;
}

// Storage types. Loads widen to float32 (forge_widen, exact). dst words:
// uint (a 32-bit dst: float32 bits or an int32 index), half or bfloat (a
// 16-bit dst: the float32 value rounded once, forge_narrow: the prelude,
// forge_half.h; indices are never written there).
static inline void reduce_put(device uint* dst, uint i, float v) { dst[i] = as_type<uint>(v); }
static inline void reduce_put(device half* dst, uint i, float v) { dst[i] = forge_narrow<half>(v); }
static inline void reduce_put(device bfloat* dst, uint i, float v) { dst[i] = forge_narrow<bfloat>(v); }
static inline void reduce_put_index(device uint* dst, uint i, uint idx) { dst[i] = idx; }
static inline void reduce_put_index(device half*, uint, uint) {}
static inline void reduce_put_index(device bfloat*, uint, uint) {}

// reduce_t: TS the src element type (float, half, bfloat), TD the dst word
// (uint, half, bfloat); the instances are listed at the end of the file.
template <typename TS, typename TD>
kernel void reduce_t(device TD* dst [[buffer(0)]],
                     const device TS* src [[buffer(1)]],
                     constant ReduceParams& p [[buffer(2)]],
                     uint3 tgpos [[threadgroup_position_in_grid]],
                     uint3 ntg [[threadgroups_per_grid]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint tsize [[threads_per_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]],
                     uint sg [[simdgroup_index_in_threadgroup]],
                     uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float part_v[REDUCE_MAX_SIMDGROUPS];
    threadgroup float part_comp[REDUCE_MAX_SIMDGROUPS];
    threadgroup uint part_idx[REDUCE_MAX_SIMDGROUPS];
    threadgroup uint part_nan[REDUCE_MAX_SIMDGROUPS];

    // Outputs beyond 65535 spread over the grid's y (see the Go side).
    const uint out = tgpos.y * ntg.x + tgpos.x;
    if (out >= p.nout) {
        return; // the whole threadgroup: no barrier is left waiting
    }

    // The offset of this output's first reduced element.
    int base = 0;
    uint r = out;
    for (int d = int(p.kdim) - 1; d >= 0; d--) {
        uint c = r % p.kshape[d];
        r /= p.kshape[d];
        base += int(c) * p.kstrides[d];
    }

    ReduceState s;
    s.v = reduce_op == R_SUM ? 0.0f : (reduce_is_max() ? -INFINITY : INFINITY);
    s.comp = 0.0f;
    s.idx = REDUCE_NONE;
    s.nan = 0;
    for (uint j = tid; j < p.nr; j += tsize) {
        int off;
        if (reduce_flat) {
            off = int(j) * p.rstrides[0];
        } else {
            off = 0;
            uint q = j;
            for (int d = int(p.rdim) - 1; d >= 0; d--) {
                uint c = q % p.rshape[d];
                q /= p.rshape[d];
                off += int(c) * p.rstrides[d];
            }
        }
        float x = forge_widen(src[base + off]);
        if (reduce_op == R_SUM) {
            s.v = reduce_two_sum(s.v, x, s.comp);
        } else if (isnan(x)) {
            if (s.nan == 0) {
                s.nan = 1;
                s.idx = j;
            }
        } else if (s.nan == 0) {
            bool better = reduce_is_max() ? x > s.v : x < s.v;
            if (better || s.idx == REDUCE_NONE) {
                s.v = x;
                s.idx = j;
            }
        }
    }
    s = reduce_simd(s);
    if (nsg > 1) {
        if (lane == 0) {
            part_v[sg] = s.v;
            part_comp[sg] = s.comp;
            part_idx[sg] = s.idx;
            part_nan[sg] = s.nan;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (sg == 0) {
            if (lane < nsg) {
                s.v = part_v[lane];
                s.comp = part_comp[lane];
                s.idx = part_idx[lane];
                s.nan = part_nan[lane];
            } else {
                s.v = reduce_op == R_SUM ? 0.0f : (reduce_is_max() ? -INFINITY : INFINITY);
                s.comp = 0.0f;
                s.idx = REDUCE_NONE;
                s.nan = 0;
            }
            s = reduce_simd(s);
        }
    }
    if (tid == 0) {
        if (reduce_op == R_ARGMAX || reduce_op == R_ARGMIN) {
            reduce_put_index(dst, out, s.idx);
        } else if (reduce_op == R_SUM) {
            reduce_put(dst, out, isfinite(s.v) ? s.v + s.comp : s.v);
        } else {
            reduce_put(dst, out, s.v);
        }
    }
}

template [[host_name("reduce_f32")]] [[kernel]] void reduce_t<float, uint>(device uint*, const device float*, constant ReduceParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("reduce_f16_f32")]] [[kernel]] void reduce_t<half, uint>(device uint*, const device half*, constant ReduceParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("reduce_bf16_f32")]] [[kernel]] void reduce_t<bfloat, uint>(device uint*, const device bfloat*, constant ReduceParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("reduce_f16")]] [[kernel]] void reduce_t<half, half>(device half*, const device half*, constant ReduceParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("reduce_bf16")]] [[kernel]] void reduce_t<bfloat, bfloat>(device bfloat*, const device bfloat*, constant ReduceParams&, uint3, uint3, uint, uint, uint, uint, uint);
