// softmax.metal — Backend.Softmax (softmax or log-softmax over the last
// axis) and Backend.SoftmaxBackward, contiguous rows, on float32, float16
// or bfloat16 views (one dtype per call: softmax_f32, softmax_f16,
// softmax_bf16, softmax_backward_*). 16-bit elements widen exactly on load,
// every step runs in float32 (row statistics included) and each output
// rounds once on store.
//
// One threadgroup per row (rows numbered x-fastest over a 2-D grid of
// threadgroups, so that more than 65535 fit), two passes over the row. Forward: pass 1 keeps a
// running (max m, Σ exp(x − m)) per thread, rescaling the sum whenever the
// max grows; the threads' pairs are merged per simdgroup (simd_max, then
// simd_sum of the rescaled sums) and then across simdgroups through
// threadgroup memory. Pass 2 writes exp(x − m)/s, or (x − m) − log s. Every
// exponent is ≤ 0. A row holding NaN or +Inf, or only −Inf, comes out NaN,
// as on the CPU and in PyTorch. Backward: pass 1 reduces Σ dy·y (softmax)
// or Σ dy (log-softmax) the same way, pass 2 writes dx.
//
// Function constants:
//   0 softmax_log (bool): log-softmax (else softmax).
#include <metal_stdlib>
using namespace metal;

enum : uint { SOFTMAX_MAX_SIMDGROUPS = 32 };

struct SoftmaxParams {
    uint rows; // number of rows (threadgroups)
    uint cols; // row length (≥ 1)
};

constant bool softmax_log [[function_constant(0)]];

// Storage types: loads widen to float32 (forge_widen, exact); stores round
// once (forge_narrow: the prelude, forge_half.h).

template <typename T>
kernel void softmax_t(device T* y [[buffer(0)]],
                      const device T* x [[buffer(1)]],
                      constant SoftmaxParams& p [[buffer(2)]],
                      uint3 tgpos [[threadgroup_position_in_grid]],
                      uint3 ntg [[threadgroups_per_grid]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint tsize [[threads_per_threadgroup]],
                      uint lane [[thread_index_in_simdgroup]],
                      uint sg [[simdgroup_index_in_threadgroup]],
                      uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float part_m[SOFTMAX_MAX_SIMDGROUPS];
    threadgroup float part_s[SOFTMAX_MAX_SIMDGROUPS];
    threadgroup uint part_bad[SOFTMAX_MAX_SIMDGROUPS];

    const uint row = tgpos.y * ntg.x + tgpos.x;
    if (row >= p.rows) {
        return; // the whole threadgroup: no barrier is left waiting
    }

    const device T* xr = x + ulong(row) * p.cols;
    device T* yr = y + ulong(row) * p.cols;

    // Pass 1: running max and rescaled sum; bad marks NaN or +Inf.
    float m = -INFINITY;
    float s = 0.0f;
    uint bad = 0;
    for (uint j = tid; j < p.cols; j += tsize) {
        float v = forge_widen(xr[j]);
        if (isnan(v) || v == INFINITY) {
            bad = 1;
        } else if (v > m) {
            s = s * exp(m - v) + 1.0f;
            m = v;
        } else if (v != -INFINITY) {
            s += exp(v - m);
        }
    }
    float mm = simd_max(m);
    float ss = simd_sum(m == -INFINITY ? 0.0f : s * exp(m - mm));
    uint bb = simd_max(bad);
    if (nsg > 1) {
        if (lane == 0) {
            part_m[sg] = mm;
            part_s[sg] = ss;
            part_bad[sg] = bb;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float m1 = lane < nsg ? part_m[lane] : -INFINITY;
        float s1 = lane < nsg ? part_s[lane] : 0.0f;
        uint b1 = lane < nsg ? part_bad[lane] : 0;
        mm = simd_max(m1);
        ss = simd_sum(m1 == -INFINITY ? 0.0f : s1 * exp(m1 - mm));
        bb = simd_max(b1);
    }
    if (bb != 0 || mm == -INFINITY) {
        for (uint j = tid; j < p.cols; j += tsize) {
            yr[j] = forge_narrow<T>(NAN);
        }
        return;
    }

    // Pass 2.
    if (softmax_log) {
        float ls = log(ss);
        for (uint j = tid; j < p.cols; j += tsize) {
            yr[j] = forge_narrow<T>((forge_widen(xr[j]) - mm) - ls);
        }
    } else {
        for (uint j = tid; j < p.cols; j += tsize) {
            yr[j] = forge_narrow<T>(exp(forge_widen(xr[j]) - mm) / ss);
        }
    }
}

template <typename T>
kernel void softmax_backward_t(device T* dx [[buffer(0)]],
                               const device T* y [[buffer(1)]],
                               const device T* dy [[buffer(2)]],
                               constant SoftmaxParams& p [[buffer(3)]],
                               uint3 tgpos [[threadgroup_position_in_grid]],
                               uint3 ntg [[threadgroups_per_grid]],
                               uint tid [[thread_index_in_threadgroup]],
                               uint tsize [[threads_per_threadgroup]],
                               uint lane [[thread_index_in_simdgroup]],
                               uint sg [[simdgroup_index_in_threadgroup]],
                               uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float part[SOFTMAX_MAX_SIMDGROUPS];

    const uint row = tgpos.y * ntg.x + tgpos.x;
    if (row >= p.rows) {
        return;
    }

    const device T* yr = y + ulong(row) * p.cols;
    const device T* gr = dy + ulong(row) * p.cols;
    device T* dr = dx + ulong(row) * p.cols;

    // Pass 1: Σ dy·y (softmax) or Σ dy (log-softmax).
    float acc = 0.0f;
    for (uint j = tid; j < p.cols; j += tsize) {
        float gj = forge_widen(gr[j]);
        acc += softmax_log ? gj : gj * forge_widen(yr[j]);
    }
    float tot = simd_sum(acc);
    if (nsg > 1) {
        if (lane == 0) {
            part[sg] = tot;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        tot = simd_sum(lane < nsg ? part[lane] : 0.0f);
    }

    // Pass 2.
    for (uint j = tid; j < p.cols; j += tsize) {
        float gj = forge_widen(gr[j]);
        float yj = forge_widen(yr[j]);
        if (softmax_log) {
            dr[j] = forge_narrow<T>(gj - exp(yj) * tot);
        } else {
            dr[j] = forge_narrow<T>(yj * (gj - tot));
        }
    }
}

template [[host_name("softmax_f32")]] [[kernel]] void softmax_t<float>(device float*, const device float*, constant SoftmaxParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("softmax_f16")]] [[kernel]] void softmax_t<half>(device half*, const device half*, constant SoftmaxParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("softmax_bf16")]] [[kernel]] void softmax_t<bfloat>(device bfloat*, const device bfloat*, constant SoftmaxParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("softmax_backward_f32")]] [[kernel]] void softmax_backward_t<float>(device float*, const device float*, const device float*, constant SoftmaxParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("softmax_backward_f16")]] [[kernel]] void softmax_backward_t<half>(device half*, const device half*, const device half*, constant SoftmaxParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("softmax_backward_bf16")]] [[kernel]] void softmax_backward_t<bfloat>(device bfloat*, const device bfloat*, const device bfloat*, constant SoftmaxParams&, uint3, uint3, uint, uint, uint, uint, uint);
