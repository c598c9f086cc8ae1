// limits.metal — kernels that exercise the limits the emulator enforces.
#include <metal_stdlib>
using namespace metal;

// capped declares a smaller maximum threadgroup than the device's.
[[max_total_threads_per_threadgroup(128)]]
kernel void capped(device float* out [[buffer(0)]],
                   uint gid [[thread_position_in_grid]]) {
    out[gid] = float(gid);
}

// capped_kernel_form declares it in the [[kernel]] attribute form.
[[kernel, max_total_threads_per_threadgroup(96)]]
void capped_kernel_form(device float* out [[buffer(0)]],
                        uint gid [[thread_position_in_grid]]) {
    out[gid] = 2.0f * float(gid);
}

// Function constants Metal requires (read) and those it does not (tested
// with is_function_constant_defined, or only gating an optional buffer).
constant uint lim_req [[function_constant(0)]];    // read by a helper
constant float lim_opt [[function_constant(1)]];   // optional
constant bool lim_gate [[function_constant(2)]];   // gates a buffer only
constant uint lim_src [[function_constant(3)]];    // read through a derived constant
constant bool lim_has_opt = is_function_constant_defined(lim_opt);
constant uint lim_twice = lim_src * 2;

static float lim_helper(float x) { return x + float(lim_req); }

kernel void fc_required(device float* out [[buffer(0)]],
                        device const float* extra [[buffer(1), function_constant(lim_gate)]],
                        uint gid [[thread_position_in_grid]]) {
    float v = lim_helper(float(gid));
    if (lim_has_opt) v *= lim_opt;
    out[gid] = v + float(lim_twice);
}

// fc_unused reads none of the file's constants.
kernel void fc_unused(device float* out [[buffer(0)]],
                      uint gid [[thread_position_in_grid]]) {
    out[gid] = 1.0f;
}

// Static threadgroup memory: the size may depend on a template parameter,
// so each instantiation is checked on its own.
template <typename T, int N>
kernel void tg_sized(device float* out [[buffer(0)]],
                     uint tid [[thread_index_in_threadgroup]]) {
    threadgroup T a[N];
    threadgroup float tail[4];
    a[tid] = T(float(tid));
    tail[tid % 4] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = dot(float4(a[tid]), float4(1, 0, 0, 0)) + tail[0];
}
template [[host_name("tg_fits")]] kernel void tg_sized<float, 8176>(device float*, uint);      // 32704 + 16 bytes
template [[host_name("tg_over_by_pad")]] kernel void tg_sized<half, 16377>(device float*, uint); // 32754 → 32768, + 16
template [[host_name("tg_over")]] kernel void tg_sized<float4, 4096>(device float*, uint);     // 65536 + 16

// fc_hidden reads a constant through a type's member, which Pipeline's
// lexical check does not follow: the read itself fails the dispatch.
constant uint lim_hidden [[function_constant(4)]];
template <typename T> struct LimRead {
    static uint get() { return lim_hidden; }
};
kernel void fc_hidden(device uint* out [[buffer(0)]],
                      uint gid [[thread_position_in_grid]]) {
    out[gid] = LimRead<float>::get();
}
