// fill.metal — Backend.Fill: set every element of a (possibly strided) view
// to one value: fill_x32 stores 32-bit words (float32 or int32 bits),
// fill_x16 16-bit ones (float16 or bfloat16 bits); the Go side converts.
//
// Function constants:
//   0 fill_flat (bool): the view is one run (ndim == 1 after coalescing):
//                       element i is at i·stride, no index decomposition.
#include <metal_stdlib>
using namespace metal;

enum : uint { FILL_MAX_DIMS = 8 };

// FillParams describes the destination after the Go side coalesced its
// dimensions (row-major order kept). Element i (row-major over shape) is at
// Σ_d idx_d·strides[d] from the bound buffer offset.
struct FillParams {
    uint value;                 // bit pattern to store
    uint n;                     // number of elements
    uint ndim;                  // 1 … FILL_MAX_DIMS
    uint shape[FILL_MAX_DIMS];
    int strides[FILL_MAX_DIMS];
};

constant bool fill_flat [[function_constant(0)]];

kernel void fill_x32(device uint* dst [[buffer(0)]],
                     constant FillParams& p [[buffer(1)]],
                     uint gid [[thread_position_in_grid]],
                     uint gsize [[threads_per_grid]]) {
    for (uint i = gid; i < p.n; i += gsize) {
        int off;
        if (fill_flat) {
            off = int(i) * p.strides[0];
        } else {
            uint r = i;
            off = 0;
            for (int d = int(p.ndim) - 1; d >= 0; d--) {
                uint c = r % p.shape[d];
                r /= p.shape[d];
                off += int(c) * p.strides[d];
            }
        }
        dst[off] = p.value;
    }
}

// fill_x16 is fill_x32 for float16 and bfloat16 views: the low 16 bits of
// p.value are stored (the Go side rounds the value once, from float64, as
// package forge/half does).
kernel void fill_x16(device ushort* dst [[buffer(0)]],
                     constant FillParams& p [[buffer(1)]],
                     uint gid [[thread_position_in_grid]],
                     uint gsize [[threads_per_grid]]) {
    const ushort bits = ushort(p.value);
    for (uint i = gid; i < p.n; i += gsize) {
        int off;
        if (fill_flat) {
            off = int(i) * p.strides[0];
        } else {
            uint r = i;
            off = 0;
            for (int d = int(p.ndim) - 1; d >= 0; d--) {
                uint c = r % p.shape[d];
                r /= p.shape[d];
                off += int(c) * p.strides[d];
            }
        }
        dst[off] = bits;
    }
}
