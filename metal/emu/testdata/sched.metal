// sched.metal — kernels that exercise the scheduler's error paths.
#include <metal_stdlib>
using namespace metal;

// divergent_barrier: the two halves of the threadgroup wait at different
// barriers (undefined behaviour on a GPU, an error in the emulator).
kernel void divergent_barrier(device float* out [[buffer(0)]],
                              uint tid [[thread_index_in_threadgroup]]) {
    if (tid < 32) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[tid] = 1;
    } else {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[tid] = 2;
    }
}

// oob_write writes one element past the end of out when gid == n.
kernel void oob_write(device float* out [[buffer(0)]],
                      constant uint& n [[buffer(1)]],
                      uint gid [[thread_position_in_grid]]) {
    out[gid] = 1.0f;  // launched with one thread too many
}

// stack_hog needs more than the 64 KB fiber stack.
kernel void stack_hog(device float* out [[buffer(0)]],
                      uint gid [[thread_position_in_grid]]) {
    volatile float big[40000];
    for (uint i = 0; i < 40000; i++) big[i] = float(i + gid);
    out[gid] = big[gid];
}

// int_div divides by a value read from memory (zero in the test).
kernel void int_div(device int* out [[buffer(0)]],
                    constant int& d [[buffer(1)]],
                    uint gid [[thread_position_in_grid]]) {
    out[gid] = int(gid + 100) / d;
}

// spin never ends for the threads with flag set (the watchdog stops it).
kernel void spin(device float* out [[buffer(0)]],
                 constant uint& flag [[buffer(1)]],
                 uint gid [[thread_position_in_grid]]) {
    float x = 0;
    while (flag != 0) {
        x += 1.0f;
        if (x < 0) break;  // never: keeps the loop from being folded away
        out[gid] = x;
    }
    out[gid] = x;
}
