// optim.metal — global-norm gradient clipping folded into AdamW, on the
// device (backend.GradClipper), so that a training step queues its
// optimizer update without reading the norm back first.
//
// grad_clip_f32: one thread adds the n per-tensor sums of squares (written
// by the sum_squares kernels into one buffer) in index order — deterministic — as
// a compensated float pair, takes the corrected square root, and writes the
// state (backend.ClipNorm, ClipCoef, ClipSkip) for gradients that are the
// true ones times a loss scale (unscale = 1/scale, a power of two, so the
// products by it are exact):
//   state[0] = norm = √Σ sums · unscale
//   state[1] = unscale · min(1, max_norm/(norm + eps)); unscale when
//              max_norm is 0 or the norm is not finite
//   state[2] = 1 when the norm is NaN or ±Inf, else 0
// Finiteness is tested on the bits, so it holds under any math mode.
//
// AdamW reads the state: fused.metal's adamw_f32 with its constant
// adamw_clipped.
#include <metal_stdlib>
using namespace metal;

struct GradClipParams {
    uint n;          // number of sums
    float max_norm;  // 0: no clipping
    float eps;       // added to the norm before dividing (1e-6)
    float unscale;   // 1/loss scale (1 without loss scaling)
};

// clip_finite reports whether x is neither NaN nor ±Inf, from its bits.
static inline bool clip_finite(float x) {
    return (as_type<uint>(x) & 0x7f800000u) != 0x7f800000u;
}

kernel void grad_clip_f32(device float* state [[buffer(0)]],
                          const device float* sums [[buffer(1)]],
                          constant GradClipParams& p [[buffer(2)]],
                          uint gid [[thread_position_in_grid]]) {
    if (gid != 0) {
        return;
    }
    // Σ sums as hi + lo (Neumaier's compensated sum), in index order.
    float hi = 0.0f;
    float lo = 0.0f;
    for (uint i = 0; i < p.n; i++) {
        const float x = sums[i];
        const float t = hi + x;
        if (fabs(hi) >= fabs(x)) {
            lo += (hi - t) + x;
        } else {
            lo += (x - t) + hi;
        }
        hi = t;
    }
    // √(hi + lo), corrected to first order.
    float norm = sqrt(hi);
    if (norm > 0.0f && clip_finite(norm)) {
        norm += (fma(-norm, norm, hi) + lo) / (2.0f * norm);
    }
    norm *= p.unscale;
    float coef = 1.0f;
    float skip = 0.0f;
    if (!clip_finite(norm)) {
        skip = 1.0f;
    } else if (p.max_norm > 0.0f) {
        coef = min(1.0f, p.max_norm / (norm + p.eps));
    }
    state[0] = norm;
    state[1] = p.unscale * coef;
    state[2] = skip;
}
