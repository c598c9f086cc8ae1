// shim.metal — MSL language features the shim must provide; each thread
// of shim_features writes results the test compares with Go.
#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

constant float kScale = 2.0f;            // program-scope constant
constexpr constant uint kTile = 4;

struct Pair {
    float2 a;
    packed_float3 p;
    half h;
};

template <typename T> T twice(T x) { return x + x; }

static inline float helper(const device float* x, uint i) { return x[i] * kScale; }

kernel void shim_features(device const float* in [[buffer(0)]],
                          device float* out [[buffer(1)]],
                          device const Pair* pairs [[buffer(2)]],
                          device half* hout [[buffer(3)]],
                          device bfloat* bout [[buffer(4)]],
                          uint2 gid2 [[thread_position_in_grid]],
                          ushort tid [[thread_index_in_threadgroup]],
                          uint3 tpg [[threads_per_grid]],
                          ushort2 tg2 [[threads_per_threadgroup]]) {
    if (gid2.x != 0 || gid2.y != 0) return;
    int k = 0;
    // vectors: constructors, swizzles, arithmetic, conversions
    float4 v = float4(in[0], in[1], in[2], in[3]);
    float4 w = float4(v.xy, 5.0f, 6);
    float3 c3 = float3(1.0f);
    int4 iv = int4(v * 2.0f);
    out[k++] = w.z + w.w + c3.y;           // 12
    out[k++] = float(iv.w);                // 2*in[3]
    out[k++] = dot(v, float4(1));          // sum
    out[k++] = length(float2(3, 4));       // 5
    out[k++] = v.wzyx.x;                   // in[3]
    half4 hv = half4(v);
    out[k++] = float(hv.y);
    out[k++] = sizeof(float3) == 16 && sizeof(packed_float3) == 12 && alignof(float4) == 16 ? 1 : 0;
    // math
    out[k++] = exp(1.0f);
    out[k++] = fast::exp2(3.0f);
    out[k++] = precise::sqrt(16.0f);
    out[k++] = rsqrt(4.0f);
    out[k++] = fma(2.0f, 3.0f, 1.0f);
    out[k++] = clamp(5.0f, 0.0f, 1.0f) + clamp(-1, 0, 3);
    out[k++] = mix(0.0f, 10.0f, 0.25f);
    out[k++] = select(1.0f, 2.0f, v.x > 0);
    out[k++] = max(3u, 7u) + min(-2, 4);
    out[k++] = abs(-3.5f) + float(abs(-2));
    out[k++] = numeric_limits<float>::max() == FLT_MAX && numeric_limits<float>::infinity() == INFINITY ? 1 : 0;
    out[k++] = float(numeric_limits<half>::max());  // 65504
    out[k++] = isnan(NAN) && isinf(-INFINITY) && !isfinite(INFINITY) ? 1 : 0;
    out[k++] = tanh(0.5f);
    out[k++] = as_type<float>(0x3f800000u);  // 1
    out[k++] = float(as_type<uint>(1.0f) >> 23);  // 127
    out[k++] = twice(1.25f) + float(twice(3));
    out[k++] = helper(in, 1);
    out[k++] = float(kTile) + float(popcount(0xF0u)) + float(clz(1u));  // 4 + 4 + 31
    // structs from a buffer
    Pair pr = pairs[0];
    float3 pp = pr.p;
    out[k++] = pr.a.y + pp.z + float(pr.h);
    // built-ins of other types
    out[k++] = float(tid) + float(tpg.x) + float(tg2.y);
    // half: rounding per operation (excess precision off)
    half h1 = half(1.0f), h2 = half(0.0004f);
    half hs = h1 + h2;  // 1.0004 rounds to 1 in half
    out[k++] = float(hs);
    hout[0] = half(in[0]) * half(3);
    // bfloat: conversions round to nearest even
    bfloat b = bfloat(1.00390625f);  // 1 + 2^-8: a tie, rounds to 1
    bout[0] = b;
    bout[1] = bfloat(in[1]);
    out[k++] = float(b) + float(bfloat(3.0f) * bfloat(2.0f));
    // bool vectors, half literals
    bool4 m = v > float4(0);  // (1, 0, 1, 1)
    out[k++] = float(m.x) + 2 * float(m.y) + 4 * float(m[2]) + 8 * float(all(m)) + 16 * float(any(!m));  // 21
    out[k++] = select(float4(0), float4(1), m).w + float(sizeof(bool4)) + float(1.5h);            // 6.5
    // vector casts convert per element (clang would reinterpret the bits)
    int4 ci = static_cast<int4>(float4(1.5f, -2.5f, 3.0f, 4.0f));
    float4 cf = (float4)(int4(1, 2, 3, 4));
    out[k++] = float(ci.x + ci.y + ci.z + ci.w) + cf.w;  // 1 - 2 + 3 + 4 + 4 = 10
    out[k++] = float(k);
}
