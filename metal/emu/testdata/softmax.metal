// softmax.metal — a row softmax with threadgroup memory, simd_max and
// simd_sum: one threadgroup per row.
#include <metal_stdlib>
using namespace metal;

kernel void softmax_rows(device const float* x [[buffer(0)]],
                         device float* y [[buffer(1)]],
                         constant uint& n [[buffer(2)]],
                         uint row [[threadgroup_position_in_grid]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]],
                         uint nt [[threads_per_threadgroup]],
                         uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float partial[32];
    device const float* xr = x + row * n;
    float m = -INFINITY;
    for (uint i = tid; i < n; i += nt) m = max(m, xr[i]);
    m = simd_max(m);
    if (lane == 0) partial[sg] = m;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    m = simd_max(lane < nsg ? partial[lane] : -INFINITY);
    threadgroup_barrier(mem_flags::mem_threadgroup);  // partial is reused below
    float s = 0;
    for (uint i = tid; i < n; i += nt) s += exp(xr[i] - m);
    s = simd_sum(s);
    if (lane == 0) partial[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    s = simd_sum(lane < nsg ? partial[lane] : 0.0f);
    for (uint i = tid; i < n; i += nt) y[row * n + i] = exp(xr[i] - m) / s;
}
