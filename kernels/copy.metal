// copy.metal — Backend.Copy: dst = src elementwise over one shape, src
// strided or broadcast (stride 0), dst strided, converting between float32
// and int32 where the dtypes differ.
//
// Function constants:
//   0 copy_flat    (bool): both views are one run (ndim == 1): element i is
//                          at i·stride in each, no index decomposition.
//   1 copy_src_int (bool): src holds int32 (else float32).
//   2 copy_dst_int (bool): dst holds int32 (else float32).
// The data moves as 32-bit words; only a dtype change converts (float→int
// truncates toward zero, as Go's int32(float64) does for in-range values).
#include <metal_stdlib>
using namespace metal;

enum : uint { COPY_MAX_DIMS = 8 };

struct CopyParams {
    uint n;                              // number of elements
    uint ndim;                           // 1 … COPY_MAX_DIMS
    uint shape[COPY_MAX_DIMS];
    int dst_strides[COPY_MAX_DIMS];
    int src_strides[COPY_MAX_DIMS];
};

constant bool copy_flat [[function_constant(0)]];
constant bool copy_src_int [[function_constant(1)]];
constant bool copy_dst_int [[function_constant(2)]];

static inline uint copy_convert(uint bits) {
    if (copy_src_int == copy_dst_int) {
        return bits;
    }
    if (copy_src_int) {
        return as_type<uint>(float(as_type<int>(bits)));
    }
    return as_type<uint>(int(as_type<float>(bits)));
}

kernel void copy_x32(device uint* dst [[buffer(0)]],
                     const device uint* src [[buffer(1)]],
                     constant CopyParams& p [[buffer(2)]],
                     uint gid [[thread_position_in_grid]],
                     uint gsize [[threads_per_grid]]) {
    for (uint i = gid; i < p.n; i += gsize) {
        int od, os;
        if (copy_flat) {
            od = int(i) * p.dst_strides[0];
            os = int(i) * p.src_strides[0];
        } else {
            uint r = i;
            od = 0;
            os = 0;
            for (int d = int(p.ndim) - 1; d >= 0; d--) {
                uint c = r % p.shape[d];
                r /= p.shape[d];
                od += int(c) * p.dst_strides[d];
                os += int(c) * p.src_strides[d];
            }
        }
        dst[od] = copy_convert(src[os]);
    }
}
