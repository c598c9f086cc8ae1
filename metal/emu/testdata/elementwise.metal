// elementwise.metal — a kernel without barriers or simd functions: the
// emulator runs its threads as plain calls (no fibers).
#include <metal_stdlib>
using namespace metal;

struct AddParams {
    uint n;
    float scale;
};

kernel void add_scaled(device const float* a [[buffer(0)]],
                       device const float* b [[buffer(1)]],
                       device float* out [[buffer(2)]],
                       constant AddParams& p [[buffer(3)]],
                       uint gid [[thread_position_in_grid]]) {
    if (gid >= p.n) return;
    out[gid] = a[gid] + p.scale * b[gid];
}

