// forge_half.h — the prelude of every kernel file: kernels.Sources()
// prepends this text to each .metal file (then `#line 1 "<file>"`, so the
// compilers count the file's own lines), so a file is one self-contained
// library for the Metal driver and the emulator alike. Not #included.
//
// The storage types of the 16-bit kernels: float32 (float), float16 (half)
// and bfloat16 (bfloat). A kernel loads with forge_widen (exact: every half
// and bfloat is a float), does its arithmetic in float32, and stores with
// forge_narrow<T> (rounded once, to nearest even), as package forge/half
// rounds:
//   float → half:   the hardware conversion half(x) (round to nearest even,
//                   overflow to ±Inf, subnormals kept; a NaN stays NaN,
//                   its payload as the conversion leaves it).
//   float → bfloat: to nearest even in integer arithmetic (forge_bf16_bits),
//                   so it does not depend on how a compiler or GPU converts;
//                   a NaN stays NaN with its sign and top payload bits, the
//                   quiet bit set.
//   half → float:   the hardware conversion float(x).
//   bfloat → float: the bits shifted up (forge_bf16_float; NaN payloads
//                   kept).
// copy.metal alone narrows and widens float16 NaNs on the bits (payloads
// kept whatever the conversion does): see copy_f16_bits there.
#include <metal_stdlib>
using namespace metal;

// forge_bf16_bits is x rounded to the nearest bfloat16 (ties to even), as
// bits; a NaN keeps its sign and top payload bits and is made quiet.
static inline ushort forge_bf16_bits(float x) {
    const uint u = as_type<uint>(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return ushort((u >> 16) | 0x40u);
    }
    return ushort((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// forge_bf16_float is the bfloat16 with bits b as a float (exact).
static inline float forge_bf16_float(ushort b) { return as_type<float>(uint(b) << 16); }

static inline float forge_widen(float x) { return x; }
static inline float forge_widen(half x) { return float(x); }
static inline float forge_widen(bfloat x) { return forge_bf16_float(as_type<ushort>(x)); }

template <typename T> static inline T forge_narrow(float x);
template <> inline float forge_narrow<float>(float x) { return x; }
template <> inline half forge_narrow<half>(float x) { return half(x); }
template <> inline bfloat forge_narrow<bfloat>(float x) { return as_type<bfloat>(forge_bf16_bits(x)); }
