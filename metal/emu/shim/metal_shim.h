// metal_shim.h — enough of the Metal Shading Language for clang to compile
// Forge's .metal kernels as C++17 on the CPU (package metal/emu).
//
// It is force-included (-include) before every kernel file; the headers
// <metal_stdlib> etc. are empty stubs. Address spaces are clang address
// spaces (so device/threadgroup/constant mix-ups are compile errors as in
// MSL), vectors are ext_vector_type, half is _Float16 and bfloat __bf16.
// Barriers and simd_* functions call into the runtime, which runs every GPU
// thread as a fiber and rendezvouses them. simdgroup matrices hold the
// whole 8×8 in every lane (uniform control flow makes that exact).
//
// Not a system header: no #include of the C or C++ library, so a kernel
// file compiles in a few hundred milliseconds.
#pragma once
#include "forge_emu_abi.h"

// ---- keywords and address spaces ------------------------------------------
// clang address spaces make device/constant/threadgroup mix-ups compile
// errors, as in MSL. They also forbid copying a struct out of such memory
// (`Params q = p;` with `constant Params& p`), which MSL allows: a kernel
// file that does that is compiled again with FORGE_EMU_NO_ADDRESS_SPACES.
#ifdef FORGE_EMU_NO_ADDRESS_SPACES
#define device
#define constant
#define threadgroup
#else
#define device __attribute__((address_space(1)))
#define constant __attribute__((address_space(2)))
#define threadgroup __attribute__((address_space(3)))
#endif
#define thread
#define kernel
#define vertex
#define fragment
#define restrict __restrict
#define METAL_FUNC inline __attribute__((always_inline))
#define __METAL_VERSION__ 310
#define FORGE_METAL_EMU 1

// is_function_constant_defined(name) is true when the dispatch's pipeline
// key set constant `name` (the generator emits forge_fcidx_<name>).
#define is_function_constant_defined(name) (::forge_rt_fc_def[forge_fcidx_##name] != 0)

// A call site: file, and line + (column << 20) (see forge_emu_abi.h).
#define FORGE_SITE \
    const char *forge_file = __builtin_FILE(), unsigned forge_line = __builtin_LINE() + (__builtin_COLUMN() << 20)

// ---- scalar types ------------------------------------------------------------
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
typedef _Float16 half;
typedef __bf16 bfloat;
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
typedef __INT8_TYPE__ int8_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __INT16_TYPE__ int16_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __UINTPTR_TYPE__ uintptr_t;

// ---- vector types -----------------------------------------------------------
template <class T, int N> using vec = T __attribute__((ext_vector_type(N)));
#define FORGE_VEC(S)                                   \
    typedef S S##2 __attribute__((ext_vector_type(2))); \
    typedef S S##3 __attribute__((ext_vector_type(3))); \
    typedef S S##4 __attribute__((ext_vector_type(4)));
FORGE_VEC(float)
FORGE_VEC(half)
FORGE_VEC(bfloat)
FORGE_VEC(int)
FORGE_VEC(uint)
FORGE_VEC(short)
FORGE_VEC(ushort)
FORGE_VEC(char)
FORGE_VEC(uchar)
FORGE_VEC(long)
FORGE_VEC(ulong)
#undef FORGE_VEC

namespace forge_emu {
// tg_static<&kernel, site, size, align>::reg records a threadgroup
// declaration of a kernel's body at load time (see forge_rt_tg_static).
template <auto F, unsigned S, unsigned long N, unsigned long A> struct tg_static {
    static inline const int reg = ::forge_rt_tg_static(reinterpret_cast<const void*>(F), S, N, A);
};
template <class T> struct vt { static constexpr int n = 1; typedef T E; static constexpr bool is_vec = false; };
template <class T, int N> struct vt<T __attribute__((ext_vector_type(N)))> {
    static constexpr int n = N; typedef T E; static constexpr bool is_vec = true;
};
template <class T> struct vt<const T> : vt<T> {};
template <class T> struct vt<T&> : vt<T> {};
template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <class A, class B> struct same { static constexpr bool v = false; };
template <class A> struct same<A, A> { static constexpr bool v = true; };
template <class T> struct is_float { static constexpr bool v = same<T, float>::v || same<T, half>::v || same<T, bfloat>::v || same<T, double>::v; };

// make<V>(args...) builds vector V from scalars and vectors (MSL vector
// constructors: float4(a.xy, 0, 1), float4(x), float4(int4_value)).
template <class V> struct builder {
    typedef typename vt<V>::E E;
    E v[vt<V>::n];
    int i = 0;
    template <class S> void add(S s) {
        if constexpr (vt<S>::is_vec) {
            for (int k = 0; k < vt<S>::n; k++) v[i++] = (E)s[k];
        } else {
            v[i++] = (E)s;
        }
    }
};
template <class V, class... A> inline V make(A... a) {
    constexpr int N = vt<V>::n;
    typedef typename vt<V>::E E;
    if constexpr (sizeof...(A) == 0) {
        return (V)(E)0;
    } else if constexpr (sizeof...(A) == 1 && !(vt<A>::is_vec || ...)) {
        return (V)((E)(a), ...);  // splat
    } else {
        builder<V> b;
        (b.add(a), ...);
        static_assert(N > 0, "");
        V r;
        for (int k = 0; k < N; k++) r[k] = b.v[k];
        return r;
    }
}
}  // namespace forge_emu

#define float2(...) ::forge_emu::make<float2>(__VA_ARGS__)
#define float3(...) ::forge_emu::make<float3>(__VA_ARGS__)
#define float4(...) ::forge_emu::make<float4>(__VA_ARGS__)
#define half2(...) ::forge_emu::make<half2>(__VA_ARGS__)
#define half3(...) ::forge_emu::make<half3>(__VA_ARGS__)
#define half4(...) ::forge_emu::make<half4>(__VA_ARGS__)
#define bfloat2(...) ::forge_emu::make<bfloat2>(__VA_ARGS__)
#define bfloat3(...) ::forge_emu::make<bfloat3>(__VA_ARGS__)
#define bfloat4(...) ::forge_emu::make<bfloat4>(__VA_ARGS__)
#define int2(...) ::forge_emu::make<int2>(__VA_ARGS__)
#define int3(...) ::forge_emu::make<int3>(__VA_ARGS__)
#define int4(...) ::forge_emu::make<int4>(__VA_ARGS__)
#define uint2(...) ::forge_emu::make<uint2>(__VA_ARGS__)
#define uint3(...) ::forge_emu::make<uint3>(__VA_ARGS__)
#define uint4(...) ::forge_emu::make<uint4>(__VA_ARGS__)
#define short2(...) ::forge_emu::make<short2>(__VA_ARGS__)
#define short3(...) ::forge_emu::make<short3>(__VA_ARGS__)
#define short4(...) ::forge_emu::make<short4>(__VA_ARGS__)
#define ushort2(...) ::forge_emu::make<ushort2>(__VA_ARGS__)
#define ushort3(...) ::forge_emu::make<ushort3>(__VA_ARGS__)
#define ushort4(...) ::forge_emu::make<ushort4>(__VA_ARGS__)
#define char2(...) ::forge_emu::make<char2>(__VA_ARGS__)
#define char3(...) ::forge_emu::make<char3>(__VA_ARGS__)
#define char4(...) ::forge_emu::make<char4>(__VA_ARGS__)
#define uchar2(...) ::forge_emu::make<uchar2>(__VA_ARGS__)
#define uchar3(...) ::forge_emu::make<uchar3>(__VA_ARGS__)
#define uchar4(...) ::forge_emu::make<uchar4>(__VA_ARGS__)
#define long2(...) ::forge_emu::make<long2>(__VA_ARGS__)
#define long3(...) ::forge_emu::make<long3>(__VA_ARGS__)
#define long4(...) ::forge_emu::make<long4>(__VA_ARGS__)
#define ulong2(...) ::forge_emu::make<ulong2>(__VA_ARGS__)
#define ulong3(...) ::forge_emu::make<ulong3>(__VA_ARGS__)
#define ulong4(...) ::forge_emu::make<ulong4>(__VA_ARGS__)

// boolN: clang's bool vectors have no swizzles and comparisons of vectors
// yield integer vectors, so boolN is a small struct (Metal's layout: one
// byte per component, bool3 padded to 4) that converts from comparisons.
#define FORGE_BOOLV_COMMON(T, N)                                                             \
    T() = default;                                                                           \
    template <class V, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec && \
                                                               ::forge_emu::vt<V>::n == N>::type> \
    T(V v) {                                                                                 \
        for (int i = 0; i < N; i++) (*this)[i] = v[i] != 0;                                  \
    }                                                                                        \
    bool& operator[](int i) { return ((bool*)this)[i]; }                                     \
    bool operator[](int i) const { return ((const bool*)this)[i]; }                          \
    T operator!() const { T r; for (int i = 0; i < N; i++) r[i] = !(*this)[i]; return r; }   \
    T operator&&(T o) const { T r; for (int i = 0; i < N; i++) r[i] = (*this)[i] && o[i]; return r; } \
    T operator||(T o) const { T r; for (int i = 0; i < N; i++) r[i] = (*this)[i] || o[i]; return r; } \
    T operator&(T o) const { return *this && o; }                                            \
    T operator|(T o) const { return *this || o; }                                            \
    T operator==(T o) const { T r; for (int i = 0; i < N; i++) r[i] = (*this)[i] == o[i]; return r; } \
    T operator!=(T o) const { T r; for (int i = 0; i < N; i++) r[i] = (*this)[i] != o[i]; return r; }
struct alignas(2) bool2 {
    bool x, y;
    FORGE_BOOLV_COMMON(bool2, 2)
    explicit bool2(bool a) : x(a), y(a) {}
    bool2(bool a, bool b) : x(a), y(b) {}
};
struct alignas(4) bool3 {
    bool x, y, z, forge_pad = false;
    FORGE_BOOLV_COMMON(bool3, 3)
    explicit bool3(bool a) : x(a), y(a), z(a) {}
    bool3(bool a, bool b, bool c) : x(a), y(b), z(c) {}
};
struct alignas(4) bool4 {
    bool x, y, z, w;
    FORGE_BOOLV_COMMON(bool4, 4)
    explicit bool4(bool a) : x(a), y(a), z(a), w(a) {}
    bool4(bool a, bool b, bool c, bool d) : x(a), y(b), z(c), w(d) {}
};
#undef FORGE_BOOLV_COMMON
namespace forge_emu {
template <class T> struct is_boolv { static constexpr bool v = same<T, bool2>::v || same<T, bool3>::v || same<T, bool4>::v; };
}  // namespace forge_emu

// Half literals: 1.5h.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wuser-defined-literals"
constexpr half operator""h(long double v) { return (half)v; }
constexpr half operator""h(unsigned long long v) { return (half)v; }
#pragma clang diagnostic pop

// packed_floatN: vectors without padding (packed_float3 is 12 bytes).
template <class T, int N> struct forge_packed {
    T v[N];
    forge_packed() = default;
    forge_packed(vec<T, N> x) { for (int i = 0; i < N; i++) v[i] = x[i]; }
    operator vec<T, N>() const { vec<T, N> r; for (int i = 0; i < N; i++) r[i] = v[i]; return r; }
    T& operator[](int i) { return v[i]; }
    T operator[](int i) const { return v[i]; }
};
typedef forge_packed<float, 2> packed_float2;
typedef forge_packed<float, 3> packed_float3;
typedef forge_packed<float, 4> packed_float4;
typedef forge_packed<half, 2> packed_half2;
typedef forge_packed<half, 3> packed_half3;
typedef forge_packed<half, 4> packed_half4;

// ---- constants ------------------------------------------------------------
#define INFINITY (__builtin_inff())
#define NAN (__builtin_nanf(""))
#define HUGE_VALF (__builtin_huge_valf())
#define HUGE_VALH ((half)__builtin_inff())
#define MAXFLOAT 0x1.fffffep+127f
#define FLT_MAX 0x1.fffffep+127f
#define FLT_MIN 0x1p-126f
#define FLT_EPSILON 0x1p-23f
#define HALF_MAX ((half)65504.0f)
#define HALF_MIN ((half)0x1p-14f)
#define HALF_EPSILON ((half)0x1p-10f)
#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
#define UINT_MAX 4294967295u
#define SHRT_MAX 32767
#define USHRT_MAX 65535
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f
#define M_PI_H ((half)M_PI_F)
#define M_LOG2E_H ((half)M_LOG2E_F)
#define M_LN2_H ((half)M_LN2_F)

namespace metal {
using ::vec;

// ---- numeric_limits -------------------------------------------------------
template <class T> struct numeric_limits;
#define FORGE_LIMITS(T, LO, HI, MINV, EPS, INF, QNAN, IS_INT, IS_SIGNED)                  \
    template <> struct numeric_limits<T> {                                                  \
        static constexpr bool is_specialized = true;                                        \
        static constexpr bool is_integer = IS_INT;                                          \
        static constexpr bool is_signed = IS_SIGNED;                                        \
        static constexpr bool has_infinity = !IS_INT;                                       \
        static constexpr bool has_quiet_NaN = !IS_INT;                                      \
        static constexpr T lowest() { return LO; }                                          \
        static constexpr T max() { return HI; }                                             \
        static constexpr T min() { return MINV; }                                           \
        static constexpr T epsilon() { return EPS; }                                        \
        static constexpr T infinity() { return INF; }                                       \
        static constexpr T quiet_NaN() { return QNAN; }                                     \
    };
FORGE_LIMITS(float, -0x1.fffffep+127f, 0x1.fffffep+127f, 0x1p-126f, 0x1p-23f, __builtin_inff(), __builtin_nanf(""), false, true)
FORGE_LIMITS(half, (half)-65504.0f, (half)65504.0f, (half)0x1p-14f, (half)0x1p-10f, (half)__builtin_inff(), (half)__builtin_nanf(""), false, true)
FORGE_LIMITS(bfloat, (bfloat)-0x1.fep+127f, (bfloat)0x1.fep+127f, (bfloat)0x1p-126f, (bfloat)0x1p-7f, (bfloat)__builtin_inff(), (bfloat)__builtin_nanf(""), false, true)
FORGE_LIMITS(int, -2147483647 - 1, 2147483647, -2147483647 - 1, 0, 0, 0, true, true)
FORGE_LIMITS(uint, 0u, 4294967295u, 0u, 0u, 0u, 0u, true, false)
FORGE_LIMITS(short, (short)-32768, (short)32767, (short)-32768, 0, 0, 0, true, true)
FORGE_LIMITS(ushort, (ushort)0, (ushort)65535, (ushort)0, 0, 0, 0, true, false)
FORGE_LIMITS(char, (char)-128, (char)127, (char)-128, 0, 0, 0, true, true)
FORGE_LIMITS(uchar, (uchar)0, (uchar)255, (uchar)0, 0, 0, 0, true, false)
FORGE_LIMITS(long, (long)(-9223372036854775807L - 1), 9223372036854775807L, (long)(-9223372036854775807L - 1), 0, 0, 0, true, true)
FORGE_LIMITS(ulong, 0ul, 18446744073709551615ul, 0ul, 0ul, 0ul, 0ul, true, false)
#undef FORGE_LIMITS

// ---- math -------------------------------------------------------------------
// Scalar float functions map to the C library (libm); half and bfloat
// compute in float and round; vectors apply the scalar per element. Only
// functions metal_stdlib declares are here: C's expm1, log1p, erf, erfc
// and OpenCL's pown are not MSL, and a kernel calling one must fail to
// compile in the emulator as it would on a Mac.
#define FORGE_VMAP1(name)                                                                 \
    template <class V, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec>::type> \
    inline V name(V v) {                                                                  \
        V r;                                                                              \
        for (int i = 0; i < ::forge_emu::vt<V>::n; i++) r[i] = name(v[i]);               \
        return r;                                                                         \
    }
#define FORGE_F1(name, expr)                                              \
    inline float name(float x) { return expr; }                           \
    inline double name(double xd) { return (double)name((float)xd); }    \
    inline half name(half x) { return (half)name((float)x); }             \
    inline bfloat name(bfloat x) { return (bfloat)name((float)x); }       \
    FORGE_VMAP1(name)

FORGE_F1(exp, __builtin_expf(x))
FORGE_F1(exp2, __builtin_exp2f(x))
FORGE_F1(exp10, __builtin_powf(10.0f, x))
FORGE_F1(log, __builtin_logf(x))
FORGE_F1(log2, __builtin_log2f(x))
FORGE_F1(log10, __builtin_log10f(x))
FORGE_F1(sqrt, __builtin_sqrtf(x))
FORGE_F1(rsqrt, 1.0f / __builtin_sqrtf(x))
FORGE_F1(sin, __builtin_sinf(x))
FORGE_F1(cos, __builtin_cosf(x))
FORGE_F1(tan, __builtin_tanf(x))
FORGE_F1(asin, __builtin_asinf(x))
FORGE_F1(acos, __builtin_acosf(x))
FORGE_F1(atan, __builtin_atanf(x))
FORGE_F1(sinh, __builtin_sinhf(x))
FORGE_F1(cosh, __builtin_coshf(x))
FORGE_F1(tanh, __builtin_tanhf(x))
FORGE_F1(asinh, __builtin_asinhf(x))
FORGE_F1(acosh, __builtin_acoshf(x))
FORGE_F1(atanh, __builtin_atanhf(x))
FORGE_F1(floor, __builtin_floorf(x))
FORGE_F1(ceil, __builtin_ceilf(x))
FORGE_F1(round, __builtin_roundf(x))
FORGE_F1(rint, __builtin_rintf(x))
FORGE_F1(trunc, __builtin_truncf(x))
FORGE_F1(fabs, __builtin_fabsf(x))
FORGE_F1(fract, x - __builtin_floorf(x))
FORGE_F1(saturate, __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f))
FORGE_F1(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x != x ? 0.0f : x)))
FORGE_F1(sinpi, __builtin_sinf(x * M_PI_F))
FORGE_F1(cospi, __builtin_cosf(x * M_PI_F))
#undef FORGE_F1

inline float abs(float x) { return __builtin_fabsf(x); }
inline half abs(half x) { return (half)__builtin_fabsf((float)x); }
inline bfloat abs(bfloat x) { return (bfloat)__builtin_fabsf((float)x); }
inline double abs(double x) { return __builtin_fabs(x); }
inline int abs(int x) { return x < 0 ? -x : x; }
inline short abs(short x) { return x < 0 ? -x : x; }
inline char abs(char x) { return x < 0 ? -x : x; }
inline long abs(long x) { return x < 0 ? -x : x; }
inline uint abs(uint x) { return x; }
inline ushort abs(ushort x) { return x; }
FORGE_VMAP1(abs)

inline bool isnan(float x) { return x != x; }
inline bool isnan(half x) { return x != x; }
inline bool isnan(bfloat x) { return (float)x != (float)x; }
inline bool isinf(float x) { return __builtin_isinf(x); }
inline bool isinf(half x) { return __builtin_isinf((float)x); }
inline bool isinf(bfloat x) { return __builtin_isinf((float)x); }
inline bool isfinite(float x) { return __builtin_isfinite(x); }
inline bool isfinite(half x) { return __builtin_isfinite((float)x); }
inline bool isfinite(bfloat x) { return __builtin_isfinite((float)x); }
inline bool signbit(float x) { return __builtin_signbit(x); }
inline bool signbit(half x) { return __builtin_signbit((float)x); }
#define FORGE_VPRED(name)                                                                 \
    template <class V, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec>::type> \
    inline vec<int, ::forge_emu::vt<V>::n> name(V v) {                                    \
        vec<int, ::forge_emu::vt<V>::n> r;                                                \
        for (int i = 0; i < ::forge_emu::vt<V>::n; i++) r[i] = name(v[i]) ? -1 : 0;      \
        return r;                                                                         \
    }
FORGE_VPRED(isnan)
FORGE_VPRED(isinf)
FORGE_VPRED(isfinite)
#undef FORGE_VPRED

#define FORGE_F2(name, expr)                                                       \
    inline float name(float x, float y) { return expr; }                           \
    inline half name(half x, half y) { return (half)name((float)x, (float)y); }    \
    inline bfloat name(bfloat x, bfloat y) { return (bfloat)name((float)x, (float)y); } \
    template <class V, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec>::type> \
    inline V name(V a, V b) {                                                      \
        V r;                                                                       \
        for (int i = 0; i < ::forge_emu::vt<V>::n; i++) r[i] = name(a[i], b[i]);  \
        return r;                                                                  \
    }
FORGE_F2(pow, __builtin_powf(x, y))
FORGE_F2(powr, __builtin_powf(x, y))
FORGE_F2(atan2, __builtin_atan2f(x, y))
FORGE_F2(fmod, __builtin_fmodf(x, y))
FORGE_F2(fmax, __builtin_fmaxf(x, y))
FORGE_F2(fmin, __builtin_fminf(x, y))
FORGE_F2(copysign, __builtin_copysignf(x, y))
FORGE_F2(fdim, __builtin_fdimf(x, y))
FORGE_F2(step, y < x ? 0.0f : 1.0f)
FORGE_F2(divide, x / y)
#undef FORGE_F2
inline float ldexp(float x, int n) { return __builtin_ldexpf(x, n); }

// max/min: floats follow fmax/fmin (a NaN operand yields the other), other
// types compare. Vector-scalar forms splat the scalar.
template <class T> inline T max(T a, T b) {
    if constexpr (::forge_emu::vt<T>::is_vec) {
        T r;
        for (int i = 0; i < ::forge_emu::vt<T>::n; i++) r[i] = max(a[i], b[i]);
        return r;
    } else if constexpr (::forge_emu::same<T, float>::v) {
        return __builtin_fmaxf(a, b);
    } else if constexpr (::forge_emu::is_float<T>::v) {
        return (T)__builtin_fmaxf((float)a, (float)b);
    } else {
        return a < b ? b : a;
    }
}
template <class T> inline T min(T a, T b) {
    if constexpr (::forge_emu::vt<T>::is_vec) {
        T r;
        for (int i = 0; i < ::forge_emu::vt<T>::n; i++) r[i] = min(a[i], b[i]);
        return r;
    } else if constexpr (::forge_emu::same<T, float>::v) {
        return __builtin_fminf(a, b);
    } else if constexpr (::forge_emu::is_float<T>::v) {
        return (T)__builtin_fminf((float)a, (float)b);
    } else {
        return b < a ? b : a;
    }
}
template <class V, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec>::type>
inline V max(V a, typename ::forge_emu::vt<V>::E b) { return max(a, (V)b); }
template <class V, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec>::type>
inline V min(V a, typename ::forge_emu::vt<V>::E b) { return min(a, (V)b); }
template <class T> inline T max3(T a, T b, T c) { return max(max(a, b), c); }
template <class T> inline T min3(T a, T b, T c) { return min(min(a, b), c); }
template <class T> inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
template <class V, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec>::type>
inline V clamp(V x, typename ::forge_emu::vt<V>::E lo, typename ::forge_emu::vt<V>::E hi) {
    return clamp(x, (V)lo, (V)hi);
}
template <class T> inline T mix(T a, T b, T t) { return a + (b - a) * t; }
template <class V, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec>::type>
inline V mix(V a, V b, typename ::forge_emu::vt<V>::E t) { return a + (b - a) * t; }
inline float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline half fma(half a, half b, half c) { return (half)__builtin_fmaf((float)a, (float)b, (float)c); }
template <class V, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec>::type>
inline V fma(V a, V b, V c) {
    V r;
    for (int i = 0; i < ::forge_emu::vt<V>::n; i++) r[i] = fma(a[i], b[i], c[i]);
    return r;
}
template <class T> inline T smoothstep(T e0, T e1, T x) {
    T t = clamp((x - e0) / (e1 - e0), (T)0, (T)1);
    return t * t * ((T)3 - (T)2 * t);
}
inline float sincos(float x, thread float& c) { c = __builtin_cosf(x); return __builtin_sinf(x); }

// select(a, b, c) is c ? b : a (per element for vectors).
template <class T> inline T select(T a, T b, bool c) { return c ? b : a; }
template <class V, class C, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec && ::forge_emu::vt<C>::is_vec>::type>
inline V select(V a, V b, C c) {
    V r;
    for (int i = 0; i < ::forge_emu::vt<V>::n; i++) r[i] = c[i] ? b[i] : a[i];
    return r;
}
template <class V, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec>::type>
inline V select(V a, V b, bool2 c) { V r; for (int i = 0; i < 2; i++) r[i] = c[i] ? b[i] : a[i]; return r; }
template <class V, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec>::type>
inline V select(V a, V b, bool3 c) { V r; for (int i = 0; i < 3; i++) r[i] = c[i] ? b[i] : a[i]; return r; }
template <class V, class = typename ::forge_emu::enable_if<::forge_emu::vt<V>::is_vec>::type>
inline V select(V a, V b, bool4 c) { V r; for (int i = 0; i < 4; i++) r[i] = c[i] ? b[i] : a[i]; return r; }
inline bool all(bool2 v) { return v.x && v.y; }
inline bool all(bool3 v) { return v.x && v.y && v.z; }
inline bool all(bool4 v) { return v.x && v.y && v.z && v.w; }
inline bool any(bool2 v) { return v.x || v.y; }
inline bool any(bool3 v) { return v.x || v.y || v.z; }
inline bool any(bool4 v) { return v.x || v.y || v.z || v.w; }
template <class V> inline bool all(V v) {
    if constexpr (::forge_emu::vt<V>::is_vec) {
        for (int i = 0; i < ::forge_emu::vt<V>::n; i++) if (!v[i]) return false;
        return true;
    } else {
        return (bool)v;
    }
}
template <class V> inline bool any(V v) {
    if constexpr (::forge_emu::vt<V>::is_vec) {
        for (int i = 0; i < ::forge_emu::vt<V>::n; i++) if (v[i]) return true;
        return false;
    } else {
        return (bool)v;
    }
}

// ---- geometric ----------------------------------------------------------------
template <class V> inline typename ::forge_emu::vt<V>::E dot(V a, V b) {
    typename ::forge_emu::vt<V>::E s = 0;
    for (int i = 0; i < ::forge_emu::vt<V>::n; i++) s += a[i] * b[i];
    return s;
}
template <class V> inline typename ::forge_emu::vt<V>::E length_squared(V a) { return dot(a, a); }
template <class V> inline typename ::forge_emu::vt<V>::E length(V a) { return sqrt(dot(a, a)); }
template <class V> inline typename ::forge_emu::vt<V>::E distance(V a, V b) { return length(a - b); }
template <class V> inline V normalize(V a) { return a * rsqrt(dot(a, a)); }
inline float3 cross(float3 a, float3 b) {
    return ::forge_emu::make<float3>(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}

// ---- integer ------------------------------------------------------------------
inline uint popcount(uint x) { return __builtin_popcount(x); }
inline int popcount(int x) { return __builtin_popcount((uint)x); }
inline ulong popcount(ulong x) { return __builtin_popcountl(x); }
inline uint clz(uint x) { return x ? __builtin_clz(x) : 32; }
inline uint ctz(uint x) { return x ? __builtin_ctz(x) : 32; }
inline uint mulhi(uint a, uint b) { return (uint)(((ulong)a * b) >> 32); }
inline int mulhi(int a, int b) { return (int)(((long)a * b) >> 32); }
inline uint reverse_bits(uint x) { return __builtin_bitreverse32(x); }
inline uint rotate(uint x, uint n) { n &= 31; return n ? (x << n) | (x >> (32 - n)) : x; }
template <class T> inline T absdiff(T a, T b) { return a > b ? a - b : b - a; }
inline uint extract_bits(uint x, uint off, uint bits) { return bits >= 32 ? x : (x >> off) & ((1u << bits) - 1); }

template <class T, class S> inline T as_type(S s) {
    static_assert(sizeof(T) == sizeof(S), "as_type: sizes differ");
    return __builtin_bit_cast(T, s);
}

namespace fast {
using metal::exp; using metal::exp2; using metal::exp10; using metal::log; using metal::log2;
using metal::log10; using metal::sqrt; using metal::rsqrt; using metal::sin; using metal::cos;
using metal::tan; using metal::tanh; using metal::pow; using metal::powr; using metal::max;
using metal::min; using metal::clamp; using metal::fmax; using metal::fmin; using metal::abs;
using metal::fabs; using metal::floor; using metal::ceil; using metal::round; using metal::trunc;
using metal::divide; using metal::atan; using metal::atan2; using metal::sinh; using metal::cosh;
using metal::normalize; using metal::length; using metal::distance; using metal::fract;
using metal::saturate; using metal::sign; using metal::sincos; using metal::step;
}
namespace precise {
using namespace metal::fast;
}

// ---- barriers -------------------------------------------------------------------
enum class mem_flags : int { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8, mem_object_data = 16 };
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return (mem_flags)((int)a | (int)b); }
inline void threadgroup_barrier(mem_flags, FORGE_SITE) { forge_rt_barrier(forge_file, forge_line); }
inline void forge_simd_noop(forge_simd_x*) {}
inline void simdgroup_barrier(mem_flags, FORGE_SITE) {
    forge_rt_simd(nullptr, 0, 0, forge_simd_noop, forge_file, forge_line);
}
enum memory_order { memory_order_relaxed = 0, memory_order_acquire = 2, memory_order_release = 3, memory_order_acq_rel = 4, memory_order_seq_cst = 5 };
enum thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };
inline void atomic_thread_fence(mem_flags, memory_order, thread_scope = thread_scope_device) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---- SIMD-group functions ---------------------------------------------------------
// Every call rendezvouses the live lanes of the simdgroup; the lanes that
// meet at the same call are the active lanes.
namespace simd_detail {
template <class T> inline T& in(forge_simd_x* x, int l) { return *(T*)x->in[l]; }
template <class T> inline T& out(forge_simd_x* x, int l) { return *(T*)x->out[l]; }
template <class T> inline T call(T v, int arg, forge_simd_fn fn, const char* file, unsigned line) {
    static_assert(sizeof(T) <= FORGE_SIMD_SLOT, "simd_*: value too large");
    static_assert(!::forge_emu::same<typename ::forge_emu::vt<T>::E, bfloat>::v,
                  "simd_* functions do not take bfloat in MSL: convert to float");
    T r;
    __builtin_memcpy((void*)&r, forge_rt_simd(&v, sizeof(T), arg, fn, file, line), sizeof(T));
    return r;
}
#define FORGE_FOR_ACTIVE(x, l) for (int l = 0; l < FORGE_SIMD_WIDTH; l++) if ((x)->active & (1u << l))
template <class T> void op_sum(forge_simd_x* x) {
    T s = (T)0; bool first = true;
    FORGE_FOR_ACTIVE(x, l) { s = first ? in<T>(x, l) : s + in<T>(x, l); first = false; }
    FORGE_FOR_ACTIVE(x, l) out<T>(x, l) = s;
}
template <class T> void op_product(forge_simd_x* x) {
    T s = (T)1;
    FORGE_FOR_ACTIVE(x, l) s = s * in<T>(x, l);
    FORGE_FOR_ACTIVE(x, l) out<T>(x, l) = s;
}
template <class T> void op_max(forge_simd_x* x) {
    T s{}; bool first = true;
    FORGE_FOR_ACTIVE(x, l) { s = first ? in<T>(x, l) : metal::max(s, in<T>(x, l)); first = false; }
    FORGE_FOR_ACTIVE(x, l) out<T>(x, l) = s;
}
template <class T> void op_min(forge_simd_x* x) {
    T s{}; bool first = true;
    FORGE_FOR_ACTIVE(x, l) { s = first ? in<T>(x, l) : metal::min(s, in<T>(x, l)); first = false; }
    FORGE_FOR_ACTIVE(x, l) out<T>(x, l) = s;
}
template <class T> void op_and(forge_simd_x* x) {
    T s = (T)~(T)0;
    FORGE_FOR_ACTIVE(x, l) s = s & in<T>(x, l);
    FORGE_FOR_ACTIVE(x, l) out<T>(x, l) = s;
}
template <class T> void op_or(forge_simd_x* x) {
    T s = (T)0;
    FORGE_FOR_ACTIVE(x, l) s = s | in<T>(x, l);
    FORGE_FOR_ACTIVE(x, l) out<T>(x, l) = s;
}
template <class T> void op_xor(forge_simd_x* x) {
    T s = (T)0;
    FORGE_FOR_ACTIVE(x, l) s = s ^ in<T>(x, l);
    FORGE_FOR_ACTIVE(x, l) out<T>(x, l) = s;
}
template <class T> void op_prefix_incl(forge_simd_x* x) {
    T s = (T)0;
    FORGE_FOR_ACTIVE(x, l) { s = s + in<T>(x, l); out<T>(x, l) = s; }
}
template <class T> void op_prefix_excl(forge_simd_x* x) {
    T s = (T)0;
    FORGE_FOR_ACTIVE(x, l) { out<T>(x, l) = s; s = s + in<T>(x, l); }
}
template <class T> void op_prefix_incl_product(forge_simd_x* x) {
    T s = (T)1;
    FORGE_FOR_ACTIVE(x, l) { s = s * in<T>(x, l); out<T>(x, l) = s; }
}
template <class T> void op_prefix_excl_product(forge_simd_x* x) {
    T s = (T)1;
    FORGE_FOR_ACTIVE(x, l) { out<T>(x, l) = s; s = s * in<T>(x, l); }
}
// Lane-to-lane moves: src(l, arg) names the lane l reads; a source lane
// that is outside the simdgroup or inactive leaves l's own value.
enum { MV_IDX, MV_DOWN, MV_UP, MV_XOR, MV_ROT_DOWN, MV_ROT_UP, MV_FIRST, MV_QUAD_IDX, MV_QUAD_XOR, MV_QUAD_DOWN, MV_QUAD_UP };
template <class T, int K> void op_move(forge_simd_x* x) {
    int first = -1;
    FORGE_FOR_ACTIVE(x, l) { if (first < 0) first = l; }
    FORGE_FOR_ACTIVE(x, l) {
        int a = x->arg[l], s;
        switch (K) {
            case MV_IDX: s = a; break;
            case MV_DOWN: s = l + a; break;
            case MV_UP: s = l - a; break;
            case MV_XOR: s = l ^ a; break;
            case MV_ROT_DOWN: s = (l + a) & 31; break;
            case MV_ROT_UP: s = (l - a) & 31; break;
            case MV_FIRST: s = first; break;
            case MV_QUAD_IDX: s = (l & ~3) | (a & 3); break;
            case MV_QUAD_XOR: s = l ^ (a & 3); break;
            case MV_QUAD_DOWN: s = (l & 3) + a < 4 ? l + a : l; break;
            default: s = (l & 3) - a >= 0 ? l - a : l; break;
        }
        if (s < 0 || s >= FORGE_SIMD_WIDTH || !(x->active & (1u << s))) s = l;
        out<T>(x, l) = in<T>(x, s);
    }
}
template <class T> void op_quad_sum(forge_simd_x* x) {
    FORGE_FOR_ACTIVE(x, l) {
        T s = (T)0;
        for (int k = l & ~3; k < (l & ~3) + 4; k++) if (x->active & (1u << k)) s = s + in<T>(x, k);
        out<T>(x, l) = s;
    }
}
inline void op_ballot(forge_simd_x* x) {
    unsigned long m = 0;
    FORGE_FOR_ACTIVE(x, l) if (x->arg[l]) m |= 1ul << l;
    FORGE_FOR_ACTIVE(x, l) out<unsigned long>(x, l) = m;
}
inline void op_is_first(forge_simd_x* x) {
    int first = -1;
    FORGE_FOR_ACTIVE(x, l) { if (first < 0) first = l; out<bool>(x, l) = l == first; }
}
inline void op_active(forge_simd_x* x) {
    FORGE_FOR_ACTIVE(x, l) out<unsigned long>(x, l) = x->active;
}
#undef FORGE_FOR_ACTIVE
}  // namespace simd_detail

#define FORGE_SIMD_RED(name, op)                                                  \
    template <class T> inline T name(T v, FORGE_SITE) {                           \
        return simd_detail::call<T>(v, 0, simd_detail::op<T>, forge_file, forge_line); \
    }
FORGE_SIMD_RED(simd_sum, op_sum)
FORGE_SIMD_RED(simd_product, op_product)
FORGE_SIMD_RED(simd_max, op_max)
FORGE_SIMD_RED(simd_min, op_min)
FORGE_SIMD_RED(simd_and, op_and)
FORGE_SIMD_RED(simd_or, op_or)
FORGE_SIMD_RED(simd_xor, op_xor)
FORGE_SIMD_RED(simd_prefix_inclusive_sum, op_prefix_incl)
FORGE_SIMD_RED(simd_prefix_exclusive_sum, op_prefix_excl)
FORGE_SIMD_RED(simd_prefix_inclusive_product, op_prefix_incl_product)
FORGE_SIMD_RED(simd_prefix_exclusive_product, op_prefix_excl_product)
FORGE_SIMD_RED(quad_sum, op_quad_sum)
#undef FORGE_SIMD_RED
#define FORGE_SIMD_MOVE(name, K)                                                                     \
    template <class T> inline T name(T v, ushort a, FORGE_SITE) {                                    \
        return simd_detail::call<T>(v, (int)a, simd_detail::op_move<T, simd_detail::K>, forge_file, forge_line); \
    }
FORGE_SIMD_MOVE(simd_shuffle, MV_IDX)
FORGE_SIMD_MOVE(simd_broadcast, MV_IDX)
FORGE_SIMD_MOVE(simd_shuffle_down, MV_DOWN)
FORGE_SIMD_MOVE(simd_shuffle_up, MV_UP)
FORGE_SIMD_MOVE(simd_shuffle_xor, MV_XOR)
FORGE_SIMD_MOVE(simd_shuffle_rotate_down, MV_ROT_DOWN)
FORGE_SIMD_MOVE(simd_shuffle_rotate_up, MV_ROT_UP)
FORGE_SIMD_MOVE(quad_shuffle, MV_QUAD_IDX)
FORGE_SIMD_MOVE(quad_broadcast, MV_QUAD_IDX)
FORGE_SIMD_MOVE(quad_shuffle_xor, MV_QUAD_XOR)
FORGE_SIMD_MOVE(quad_shuffle_down, MV_QUAD_DOWN)
FORGE_SIMD_MOVE(quad_shuffle_up, MV_QUAD_UP)
#undef FORGE_SIMD_MOVE
template <class T> inline T simd_broadcast_first(T v, FORGE_SITE) {
    return simd_detail::call<T>(v, 0, simd_detail::op_move<T, simd_detail::MV_FIRST>, forge_file, forge_line);
}

// simd_vote is the result of simd_ballot / simd_active_threads_mask.
struct simd_vote {
    typedef unsigned long vote_t;
    vote_t v;
    explicit constexpr simd_vote(vote_t x = 0) : v(x) {}
    explicit constexpr operator vote_t() const { return v; }
    explicit constexpr operator bool() const { return v != 0; }
    constexpr bool all() const { return v == 0xfffffffful; }
    constexpr bool any() const { return v != 0; }
};
inline simd_vote simd_ballot(bool p, FORGE_SITE) {
    return simd_vote(*(const unsigned long*)forge_rt_simd(nullptr, 0, p ? 1 : 0, simd_detail::op_ballot, forge_file, forge_line));
}
inline simd_vote simd_active_threads_mask(FORGE_SITE) {
    return simd_vote(*(const unsigned long*)forge_rt_simd(nullptr, 0, 0, simd_detail::op_active, forge_file, forge_line));
}
inline bool simd_all(bool p, FORGE_SITE) {
    // Copy each result out before the next call: both calls return the
    // lane's one result slot, so the second would overwrite the first.
    const unsigned long r = *(const unsigned long*)forge_rt_simd(nullptr, 0, p ? 1 : 0, simd_detail::op_ballot, forge_file, forge_line);
    const unsigned long a = *(const unsigned long*)forge_rt_simd(nullptr, 0, 0, simd_detail::op_active, forge_file, forge_line);
    return r == a;
}
inline bool simd_any(bool p, FORGE_SITE) {
    return *(const unsigned long*)forge_rt_simd(nullptr, 0, p ? 1 : 0, simd_detail::op_ballot, forge_file, forge_line) != 0;
}
inline bool simd_is_first(FORGE_SITE) {
    return *(const bool*)forge_rt_simd(nullptr, 0, 0, simd_detail::op_is_first, forge_file, forge_line);
}

// ---- simdgroup matrices ----------------------------------------------------------
// simdgroup_matrix<T, Cols, Rows>: every lane holds all elements, row-major
// m[row * Cols + col].
template <class T, int Cols, int Rows> struct simdgroup_matrix {
    alignas(16) T m[Rows * Cols];
    // forge_dirty: a lane may have changed its own elements through
    // thread_elements(); the lanes' copies are merged at the next matrix
    // operation.
    bool forge_dirty = false;
    simdgroup_matrix() = default;
    // simdgroup_matrix(d) is the diagonal matrix with d on the diagonal.
    explicit simdgroup_matrix(T d) {
        for (int r = 0; r < Rows; r++)
            for (int c = 0; c < Cols; c++) m[r * Cols + c] = r == c ? d : (T)0;
    }
    // thread_elements() is the calling lane's two elements, as on Apple
    // GPUs: lane l holds (row, col) and (row, col + 1) with q = l / 4,
    // row = (q & 4) + (l / 2) % 4, col = (q & 2) * 2 + (l % 2) * 2.
    thread vec<T, 2>& thread_elements() {
        static_assert(Rows == 8 && Cols == 8, "thread_elements: 8×8 matrices only");
        forge_dirty = true;
        return *(thread vec<T, 2>*)&m[forge_elem_index(forge_rt_lane())];
    }
    static int forge_elem_index(unsigned l) {
        unsigned q = l / 4;
        unsigned row = (q & 4) + (l / 2) % 4, col = (q & 2) * 2 + (l % 2) * 2;
        return (int)(row * 8 + col);
    }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows> inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T v) {
    simdgroup_matrix<T, Cols, Rows> r;
    for (int i = 0; i < Rows * Cols; i++) r.m[i] = v;
    return r;
}

// simdgroup_load and simdgroup_store act once per simdgroup, at a
// rendezvous of its lanes, as the lanes of a SIMD group do in lockstep on
// the GPU: a load sees every write the lanes made before it and none they
// make after it (a lane that stores over the source right after its load
// cannot change what a later-running lane loads), and a store happens once.
namespace simd_detail {
struct mat_io {
    const void* ptr;   // source or destination (address space cast away)
    const void* mat;   // the storing lane's matrix elements
    unsigned long epr, ox, oy;
    int transpose;
};
inline int first_active(forge_simd_x* x) {
    for (int l = 0; l < FORGE_SIMD_WIDTH; l++)
        if (x->active & (1u << l)) return l;
    return 0;
}
template <class T, int Cols, int Rows, class P> void op_mat_load(forge_simd_x* x) {
    static_assert(sizeof(T) * Rows * Cols <= FORGE_SIMD_SHARED, "simdgroup matrix too large");
    const mat_io* io = (const mat_io*)x->in[first_active(x)];
    P* base = (P*)io->ptr + io->oy * io->epr + io->ox;
    T* m = (T*)x->shared;
    if (!io->transpose) {
        for (int r = 0; r < Rows; r++)
            for (int c = 0; c < Cols; c++) m[r * Cols + c] = (T)base[r * io->epr + c];
    } else {
        for (int r = 0; r < Rows; r++)
            for (int c = 0; c < Cols; c++) m[r * Cols + c] = (T)base[c * io->epr + r];
    }
    for (int l = 0; l < FORGE_SIMD_WIDTH; l++)
        if (x->active & (1u << l)) *(void**)x->out[l] = x->shared;
}
template <class T, int Cols, int Rows, class P> void op_mat_store(forge_simd_x* x) {
    const mat_io* io = (const mat_io*)x->in[first_active(x)];
    P* base = (P*)io->ptr + io->oy * io->epr + io->ox;
    const T* m = (const T*)io->mat;
    typedef typename ::forge_emu::vt<P>::E PE;
    if (!io->transpose) {
        for (int r = 0; r < Rows; r++)
            for (int c = 0; c < Cols; c++) base[r * io->epr + c] = (PE)m[r * Cols + c];
    } else {
        for (int r = 0; r < Rows; r++)
            for (int c = 0; c < Cols; c++) base[c * io->epr + r] = (PE)m[r * Cols + c];
    }
}
}  // namespace simd_detail

// Element (r, c) of the matrix is src[(origin.y + r) * elements_per_row +
// origin.x + c]; with transpose it is element (c, r) of that block.
template <class T, int Cols, int Rows, class P>
inline void simdgroup_load(thread simdgroup_matrix<T, Cols, Rows>& d, P* src, ulong elements_per_row = Cols,
                           ulong2 matrix_origin = 0, bool transpose_matrix = false, FORGE_SITE) {
    simd_detail::mat_io io{(const void*)src, nullptr, elements_per_row, matrix_origin.x, matrix_origin.y,
                           transpose_matrix ? 1 : 0};
    const void* r = forge_rt_simd(&io, sizeof io, 0, simd_detail::op_mat_load<T, Cols, Rows, P>, forge_file, forge_line);
    __builtin_memcpy((void*)d.m, *(void* const*)r, sizeof d.m);
    d.forge_dirty = false;
}
template <class T, int Cols, int Rows, class P>
inline void simdgroup_store(thread const simdgroup_matrix<T, Cols, Rows>& a, P* dst, ulong elements_per_row = Cols,
                            ulong2 matrix_origin = 0, bool transpose_matrix = false, FORGE_SITE) {
    if constexpr (Cols == Rows) forge_sync(a, forge_file, forge_line);
    simd_detail::mat_io io{(const void*)dst, (const void*)a.m, elements_per_row, matrix_origin.x, matrix_origin.y,
                           transpose_matrix ? 1 : 0};
    forge_rt_simd(&io, sizeof io, 0, simd_detail::op_mat_store<T, Cols, Rows, P>, forge_file, forge_line);
}
namespace simd_detail {
// op_merge builds the matrix every lane agrees on: the first active lane's
// copy, with each active lane's own two elements (thread_elements) put in.
template <class T> void op_merge(forge_simd_x* x) {
    static_assert(sizeof(T) * 64 <= FORGE_SIMD_SHARED, "");
    T* m = (T*)x->shared;
    __builtin_memcpy(m, *(const void* const*)x->in[first_active(x)], sizeof(T) * 64);
    for (int l = 0; l < FORGE_SIMD_WIDTH; l++) {
        if (!(x->active & (1u << l))) continue;
        const T* own = *(const T* const*)x->in[l];
        int i = simdgroup_matrix<T, 8, 8>::forge_elem_index(l);
        m[i] = own[i];
        m[i + 1] = own[i + 1];
    }
    for (int l = 0; l < FORGE_SIMD_WIDTH; l++)
        if (x->active & (1u << l)) *(void**)x->out[l] = x->shared;
}
}  // namespace simd_detail

// forge_sync merges a matrix whose lanes changed their elements through
// thread_elements() (a rendezvous of the simdgroup).
template <class T, int N>
inline void forge_sync(const simdgroup_matrix<T, N, N>& cm, const char* file, unsigned line) {
    if (!cm.forge_dirty) return;
    simdgroup_matrix<T, N, N>& mm = const_cast<simdgroup_matrix<T, N, N>&>(cm);
    const void* p = (const void*)mm.m;
    const void* r = forge_rt_simd(&p, sizeof p, 0, simd_detail::op_merge<T>, file, line);
    __builtin_memcpy((void*)mm.m, *(void* const*)r, sizeof mm.m);
    mm.forge_dirty = false;
}

// d = a·b + c, accumulated in float in k order, rounded to d's type.
template <class TD, class TA, class TB, class TC, int N>
inline void simdgroup_multiply_accumulate(thread simdgroup_matrix<TD, N, N>& d, const thread simdgroup_matrix<TA, N, N>& a,
                                          const thread simdgroup_matrix<TB, N, N>& b,
                                          const thread simdgroup_matrix<TC, N, N>& c, FORGE_SITE) {
    forge_sync(a, forge_file, forge_line);
    forge_sync(b, forge_file, forge_line);
    forge_sync(c, forge_file, forge_line);
    typedef float row __attribute__((ext_vector_type(N)));
    row acc[N], fb[N];
    for (int r = 0; r < N; r++)
        for (int col = 0; col < N; col++) {
            acc[r][col] = (float)c.m[r * N + col];
            fb[r][col] = (float)b.m[r * N + col];
        }
    for (int r = 0; r < N; r++)
        for (int k = 0; k < N; k++) acc[r] = __builtin_elementwise_fma((row)(float)a.m[r * N + k], fb[k], acc[r]);
    for (int r = 0; r < N; r++)
        for (int col = 0; col < N; col++) d.m[r * N + col] = (TD)acc[r][col];
    d.forge_dirty = false;
}
template <class TD, class TA, class TB, int N>
inline void simdgroup_multiply(thread simdgroup_matrix<TD, N, N>& d, const thread simdgroup_matrix<TA, N, N>& a,
                               const thread simdgroup_matrix<TB, N, N>& b, FORGE_SITE) {
    simdgroup_matrix<TD, N, N> z = make_filled_simdgroup_matrix<TD, N, N>((TD)0);
    simdgroup_multiply_accumulate(d, a, b, z, forge_file, forge_line);
}

// ---- atomics -------------------------------------------------------------------
template <class T> struct atomic { T forge_v; };
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<bool> atomic_bool;
typedef atomic<ulong> atomic_ulong;
typedef atomic<long> atomic_long;

namespace atomic_detail {
template <class A> inline auto ptr(A* a) { return (decltype(a->forge_v)*)(&a->forge_v); }
template <class T> struct bits { typedef T type; };
template <> struct bits<float> { typedef uint type; };
// rmw applies f to the current value with a compare-and-swap loop.
template <class T, class F> inline T rmw(T* p, F f) {
    typedef typename bits<T>::type B;
    B* bp = (B*)p;
    B old = __atomic_load_n(bp, __ATOMIC_RELAXED);
    for (;;) {
        T cur = __builtin_bit_cast(T, old);
        B nv = __builtin_bit_cast(B, (T)f(cur));
        if (__atomic_compare_exchange_n(bp, &old, nv, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return cur;
    }
}
}  // namespace atomic_detail
template <class A, class T> inline void atomic_store_explicit(A* a, T v, memory_order = memory_order_relaxed) {
    auto p = atomic_detail::ptr(a);
    typedef typename atomic_detail::bits<decltype(a->forge_v)>::type B;
    __atomic_store_n((B*)p, __builtin_bit_cast(B, (decltype(a->forge_v))v), __ATOMIC_SEQ_CST);
}
template <class A> inline auto atomic_load_explicit(A* a, memory_order = memory_order_relaxed) {
    auto p = atomic_detail::ptr(a);
    typedef decltype(a->forge_v) T;
    typedef typename atomic_detail::bits<T>::type B;
    return __builtin_bit_cast(T, __atomic_load_n((B*)p, __ATOMIC_SEQ_CST));
}
template <class A, class T> inline auto atomic_exchange_explicit(A* a, T v, memory_order = memory_order_relaxed) {
    typedef decltype(a->forge_v) E;
    return atomic_detail::rmw(atomic_detail::ptr(a), [&](E) { return (E)v; });
}
#define FORGE_ATOMIC_RMW(name, expr)                                                     \
    template <class A, class T> inline auto name(A* a, T v, memory_order = memory_order_relaxed) { \
        typedef decltype(a->forge_v) E;                                                  \
        E w = (E)v;                                                                      \
        return atomic_detail::rmw(atomic_detail::ptr(a), [&](E x) { return (E)(expr); }); \
    }
FORGE_ATOMIC_RMW(atomic_fetch_add_explicit, x + w)
FORGE_ATOMIC_RMW(atomic_fetch_sub_explicit, x - w)
FORGE_ATOMIC_RMW(atomic_fetch_max_explicit, x < w ? w : x)
FORGE_ATOMIC_RMW(atomic_fetch_min_explicit, w < x ? w : x)
FORGE_ATOMIC_RMW(atomic_fetch_and_explicit, x & w)
FORGE_ATOMIC_RMW(atomic_fetch_or_explicit, x | w)
FORGE_ATOMIC_RMW(atomic_fetch_xor_explicit, x ^ w)
#undef FORGE_ATOMIC_RMW
template <class A, class T>
inline bool atomic_compare_exchange_weak_explicit(A* a, thread T* expected, T desired, memory_order = memory_order_relaxed,
                                                  memory_order = memory_order_relaxed) {
    typedef decltype(a->forge_v) E;
    typedef typename atomic_detail::bits<E>::type B;
    B exp = __builtin_bit_cast(B, (E)*expected);
    bool ok = __atomic_compare_exchange_n((B*)atomic_detail::ptr(a), &exp, __builtin_bit_cast(B, (E)desired), false,
                                          __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    if (!ok) *expected = (T)__builtin_bit_cast(E, exp);
    return ok;
}
template <class A, class T>
inline bool atomic_compare_exchange_strong_explicit(A* a, thread T* expected, T desired, memory_order m1 = memory_order_relaxed,
                                                    memory_order m2 = memory_order_relaxed) {
    return atomic_compare_exchange_weak_explicit(a, expected, desired, m1, m2);
}
}  // namespace metal

// ---- launcher support --------------------------------------------------------------
namespace forge_emu {
template <class T> using ptr = T*;
// builtin<T>(v) converts a three-component built-in to the declared type
// (uint, ushort, uint2, uint3, …): scalars take the x component.
template <class T> inline T builtin3(const unsigned* v) {
    if constexpr (vt<T>::is_vec) {
        T r;
        for (int i = 0; i < vt<T>::n; i++) r[i] = (typename vt<T>::E)v[i];
        return r;
    } else {
        return (T)v[0];
    }
}
template <class T> inline T builtin1(unsigned v) { return (T)v; }
}  // namespace forge_emu
