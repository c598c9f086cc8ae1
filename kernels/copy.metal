// copy.metal — Backend.Copy: dst = src elementwise over one shape, src
// strided or broadcast (stride 0), dst strided, converting where the
// dtypes differ: copy_x32 between float32 and int32, copy_cvt (below) when
// either side is float16 or bfloat16.
//
// Function constants:
//   0 copy_flat    (bool): both views are one run (ndim == 1): element i is
//                          at i·stride in each, no index decomposition.
//   1 copy_src_int (bool): src holds int32 (else float32).
//   2 copy_dst_int (bool): dst holds int32 (else float32).
//   5 copy_vec4    (bool): copy_x32: copy_flat, dst contiguous, src
//                          contiguous or a broadcast scalar, both bound at
//                          a 16-byte multiple (the Go side checks): each
//                          thread moves 4 words per step (uint4 loads and
//                          stores), the last n mod 4 by the scalar loop.
// The data moves as 32-bit words; only a dtype change converts (float→int
// truncates toward zero, as Go's int32(float64) does for in-range values).
#include <metal_stdlib>
using namespace metal;

enum : uint { COPY_MAX_DIMS = 8 };

struct CopyParams {
    uint n;                              // number of elements
    uint ndim;                           // 1 … COPY_MAX_DIMS
    uint shape[COPY_MAX_DIMS];
    int dst_strides[COPY_MAX_DIMS];
    int src_strides[COPY_MAX_DIMS];
};

constant bool copy_flat [[function_constant(0)]];
constant bool copy_src_int [[function_constant(1)]];
constant bool copy_dst_int [[function_constant(2)]];
constant bool copy_vec4 [[function_constant(5)]];

static inline uint copy_convert(uint bits) {
    if (copy_src_int == copy_dst_int) {
        return bits;
    }
    if (copy_src_int) {
        return as_type<uint>(float(as_type<int>(bits)));
    }
    return as_type<uint>(int(as_type<float>(bits)));
}

kernel void copy_x32(device uint* dst [[buffer(0)]],
                     const device uint* src [[buffer(1)]],
                     constant CopyParams& p [[buffer(2)]],
                     uint gid [[thread_position_in_grid]],
                     uint gsize [[threads_per_grid]]) {
    uint start = 0;
    if (copy_vec4) {
        const bool src_vec = p.src_strides[0] != 0;
        for (uint i = gid; i < p.n / 4; i += gsize) {
            const uint4 x = src_vec ? ((const device uint4*)src)[i] : uint4(src[0]);
            uint4 r;
            for (uint c = 0; c < 4; c++) {
                r[c] = copy_convert(x[c]);
            }
            ((device uint4*)dst)[i] = r;
        }
        start = p.n / 4 * 4;
    }
    for (uint i = start + gid; i < p.n; i += gsize) {
        int od, os;
        if (copy_flat) {
            od = int(i) * p.dst_strides[0];
            os = int(i) * p.src_strides[0];
        } else {
            uint r = i;
            od = 0;
            os = 0;
            for (int d = int(p.ndim) - 1; d >= 0; d--) {
                uint c = r % p.shape[d];
                r /= p.shape[d];
                od += int(c) * p.dst_strides[d];
                os += int(c) * p.src_strides[d];
            }
        }
        dst[od] = copy_convert(src[os]);
    }
}

// ---- 16-bit dtypes ------------------------------------------------------------
// copy_cvt is Backend.Copy when either side is float16 or bfloat16: any
// pair of float32, int32, float16 and bfloat16 (including 16 ← 16 of one
// dtype, a plain move of the bits). The views are bound as bytes and read
// through the pointer type of their dtype.
//
// Function constants (with copy_flat, 0, as above):
//   3 copy_src_type (uint): src dtype: COPY_F32, COPY_I32, COPY_F16, COPY_BF16.
//   4 copy_dst_type (uint): dst dtype, the same codes.
//
// Conversions go through float32, which holds every float16 and bfloat16
// exactly: widening is exact (NaN payloads kept: float16 NaNs are widened
// on the bits, since a hardware conversion may quiet a signalling one);
// narrowing to float16 is the hardware's float → half conversion (round to
// nearest even, overflow to ±Inf, half subnormals kept; NaNs on the bits,
// copy_f16_bits); narrowing to bfloat16 rounds to nearest even in integer
// arithmetic (forge_bf16_bits, the prelude's: forge_half.h), so it does
// not depend on how a compiler or GPU converts float → bfloat. int32 →
// 16-bit rounds once: the int32 is first rounded to float32 *to odd*
// (copy_i32_to_odd_float: exact when it fits 24 bits, else the
// truncation with its last bit set), which keeps
// the information a single rounding to ≤ 11 bits needs, so the narrowing
// gives the int32 rounded once to nearest even, as package forge/half
// rounds the exact value (a plain float(int) first would round twice:
// 2^24 + 2^16 + 1 would become the tie 2^24 + 2^16, then 2^24 in bfloat16,
// not 2^24 + 2^17). 16-bit → int32 truncates toward zero, as float32 → int32.
// Equal dtypes copy the bits unchanged (NaN payloads too).
enum : uint { COPY_F32 = 0, COPY_I32 = 1, COPY_F16 = 2, COPY_BF16 = 3 };

constant uint copy_src_type [[function_constant(3)]];
constant uint copy_dst_type [[function_constant(4)]];

// copy_f16_bits rounds f to the nearest float16 (ties to even: the
// hardware conversion, forge_narrow<half>) and returns its bits; unlike
// forge_narrow<half>, a NaN is narrowed on the bits (sign and top payload
// bits kept, quiet bit set), so its payload does not depend on what a
// GPU's conversion does with NaNs.
static inline ushort copy_f16_bits(float f) {
    uint u = as_type<uint>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return ushort(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
    }
    return as_type<ushort>(forge_narrow<half>(f));
}

// copy_i32_to_odd_float is v rounded to float32 to odd: v itself when
// exact, else the float32 next to v toward zero with its last significand
// bit set (one of v's two float32 neighbours; it lies strictly between
// the float32s a 16-bit narrowing rounds between, never on a tie).
static inline float copy_i32_to_odd_float(int v) {
    const uint mag = v < 0 ? uint(0) - uint(v) : uint(v); // |v|, INT_MIN too
    const uint lead = 31u - clz(mag | 1u);                // top bit's position
    if (lead < 24u) {
        return float(v); // exact
    }
    const uint sh = lead - 23u;                    // bits below float32's 24
    const uint t = mag >> sh;                      // truncated significand
    const bool inexact = (mag & ((1u << sh) - 1u)) != 0u;
    uint bits = (uint(lead + 127u) << 23) | (t & 0x7fffffu);
    if (inexact) {
        bits |= 1u;
    }
    if (v < 0) {
        bits |= 0x80000000u;
    }
    return as_type<float>(bits);
}

// copy_load_float reads src element os as float32 (an int32 rounded to
// odd: see copy_i32_to_odd_float; read only for a 16-bit dst).
static inline float copy_load_float(const device uchar* src, int os) {
    switch (copy_src_type) {
    case COPY_F32: return ((const device float*)src)[os];
    case COPY_I32: return copy_i32_to_odd_float(((const device int*)src)[os]);
    case COPY_F16: {
        // NaNs widen with their payload as it is (a signalling NaN stays
        // one), as forge/half widens: a hardware conversion (forge_widen)
        // may quiet it.
        const uint h = ((const device ushort*)src)[os];
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0u) {
            return as_type<float>(((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13));
        }
        return forge_widen(as_type<half>(ushort(h)));
    }
    default: return forge_bf16_float(((const device ushort*)src)[os]);
    }
}

kernel void copy_cvt(device uchar* dst [[buffer(0)]],
                     const device uchar* src [[buffer(1)]],
                     constant CopyParams& p [[buffer(2)]],
                     uint gid [[thread_position_in_grid]],
                     uint gsize [[threads_per_grid]]) {
    for (uint i = gid; i < p.n; i += gsize) {
        int od, os;
        if (copy_flat) {
            od = int(i) * p.dst_strides[0];
            os = int(i) * p.src_strides[0];
        } else {
            uint r = i;
            od = 0;
            os = 0;
            for (int d = int(p.ndim) - 1; d >= 0; d--) {
                uint c = r % p.shape[d];
                r /= p.shape[d];
                od += int(c) * p.dst_strides[d];
                os += int(c) * p.src_strides[d];
            }
        }
        if (copy_src_type == copy_dst_type) { // 16-bit ← 16-bit of one dtype
            ((device ushort*)dst)[od] = ((const device ushort*)src)[os];
            continue;
        }
        switch (copy_dst_type) {
        case COPY_F32:
            ((device float*)dst)[od] = copy_load_float(src, os);
            break;
        case COPY_I32: // from a 16-bit src
            ((device int*)dst)[od] = int(copy_load_float(src, os));
            break;
        case COPY_F16:
            ((device ushort*)dst)[od] = copy_f16_bits(copy_load_float(src, os));
            break;
        default:
            ((device ushort*)dst)[od] = forge_bf16_bits(copy_load_float(src, os));
            break;
        }
    }
}
