// basic.metal — small kernels for the emulator's own tests.
#include <metal_stdlib>
using namespace metal;

// reverse_tg reverses each threadgroup's chunk through threadgroup memory.
// With barrier = false the barrier is missing: the result depends on the
// order the threads run in.
kernel void reverse_tg(device const float* in [[buffer(0)]],
                       device float* out [[buffer(1)]],
                       constant uint& with_barrier [[buffer(2)]],
                       uint tid [[thread_index_in_threadgroup]],
                       uint tg [[threadgroup_position_in_grid]],
                       uint n [[threads_per_threadgroup]]) {
    threadgroup float tile[256];
    tile[tid] = in[tg * n + tid];
    if (with_barrier) threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tg * n + tid] = tile[n - 1 - tid];
}

// simd_ops writes, per thread, the results of the simd functions on x.
// out is 9 floats per thread.
kernel void simd_ops(device const float* x [[buffer(0)]],
                     device float* out [[buffer(1)]],
                     uint gid [[thread_position_in_grid]],
                     uint lane [[thread_index_in_simdgroup]]) {
    float v = x[gid];
    device float* o = out + gid * 9;
    o[0] = simd_sum(v);
    o[1] = simd_max(v);
    o[2] = simd_min(v);
    o[3] = simd_prefix_inclusive_sum(v);
    o[4] = simd_prefix_exclusive_sum(v);
    o[5] = simd_shuffle(v, (lane * 7 + 3) & 31);
    o[6] = as_type<float>(simd_shuffle_xor(as_type<uint>(v), 5u));
    o[7] = simd_broadcast(v, 2);
    o[8] = simd_shuffle_down(v, 3);
}

// simd_more: ballot/any/all/broadcast_first/shuffle_up/quad_sum, and a
// simd_sum inside a branch (only the lanes that take it are active).
// out is 8 floats per thread.
kernel void simd_more(device const float* x [[buffer(0)]],
                      device float* out [[buffer(1)]],
                      uint gid [[thread_position_in_grid]],
                      uint lane [[thread_index_in_simdgroup]]) {
    float v = x[gid];
    device float* o = out + gid * 8;
    simd_vote b = simd_ballot(v > 0);
    o[0] = float(uint(static_cast<simd_vote::vote_t>(b) & 0xffffffffu) % 65521u);
    o[1] = simd_any(v > 40) ? 1 : 0;
    o[2] = simd_all(v > -40) ? 1 : 0;     // false in simdgroup 0, true in 1
    o[3] = simd_shuffle_up(v, 2);
    o[4] = quad_sum(v);
    o[5] = -1;
    if (lane % 3 == 0) {
        o[5] = simd_sum(v);                  // lanes 0, 3, 6, … only
        o[6] = simd_broadcast_first(v);      // the lowest of them: lane 0
    } else {
        o[6] = simd_broadcast_first(v);      // the lowest lane not ≡ 0 mod 3
    }
    o[7] = simd_is_first() ? 1 : 0;
}

// early_exit: threads past n return before a barrier the others wait at
// (every live thread arrives: the barrier completes).
kernel void early_exit(device float* out [[buffer(0)]],
                       constant uint& n [[buffer(1)]],
                       uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float t[64];
    if (tid >= n) return;
    t[tid] = float(tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = t[n - 1 - tid];
}

[[kernel]] void attr_spelling(device float* out [[buffer(0)]],
                              uint gid [[thread_position_in_grid]]) {
    out[gid] = 7;
}
