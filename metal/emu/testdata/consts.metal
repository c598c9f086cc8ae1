// consts.metal — function constants.
#include <metal_stdlib>
using namespace metal;

constant bool fc_square [[function_constant(0)]];
constant float fc_scale [[function_constant(1)]];
constant uint fc_mode [[function_constant(7)]];
constant bool fc_has_scale = is_function_constant_defined(fc_scale);

kernel void fc_kernel(device float* out [[buffer(0)]],
                      uint gid [[thread_position_in_grid]]) {
    float v = float(gid);
    if (fc_square) v = v * v;
    if (fc_has_scale) v *= fc_scale;
    if (fc_mode == 2) v = -v;
    out[gid] = v;
}

// A template kernel with explicit, host_name'd instantiations.
template <typename T>
kernel void fill_t(device T* out [[buffer(0)]],
                   constant float& value [[buffer(1)]],
                   uint gid [[thread_position_in_grid]]) {
    out[gid] = T(value) + T(gid);
}
template [[host_name("fill_t_f32")]] kernel void fill_t<float>(device float*, constant float&, uint);
template [[host_name("fill_t_i32")]] kernel void fill_t<int>(device int*, constant float&, uint);

// Device atomics across threadgroups (and worker threads).
kernel void atomics(device atomic_int* count [[buffer(0)]],
                    device atomic_float* sum [[buffer(1)]],
                    device atomic_uint* maxv [[buffer(2)]],
                    uint gid [[thread_position_in_grid]]) {
    atomic_fetch_add_explicit(count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(sum, 0.5f, memory_order_relaxed);
    atomic_fetch_max_explicit(maxv, gid, memory_order_relaxed);
}

// Optional buffer: bound only when has_bias is set.
constant bool has_bias [[function_constant(3)]];

kernel void add_bias(device float* out [[buffer(0)]],
                     device const float* bias [[buffer(1), function_constant(has_bias)]],
                     uint gid [[thread_position_in_grid]]) {
    out[gid] = has_bias ? bias[gid] : -1.0f;
}
