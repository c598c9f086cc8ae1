// crossentropy.metal — Backend.CrossEntropy and CrossEntropyBackward:
// fused cross-entropy over logits (N, V), contiguous rows, int32 targets
// (N, any stride). The logits are float32, float16 or bfloat16
// (cross_entropy_f32, _f16, _bf16, cross_entropy_backward_*); loss and lse
// are float32 always, dlogits has the logits' dtype. 16-bit logits widen
// exactly on load, all arithmetic is float32, and a 16-bit dlogits
// element rounds once on store.
//
// One threadgroup per row (rows numbered x-fastest over a 2-D grid of
// threadgroups, so that more than 65535 fit). The threads stride through
// the row (thread t takes t, t+T, …).
//
// Forward: one pass keeps, per thread, a running max m and r = the sum of
// exp(x − m) over every element but one designated maximum (whose term is
// exactly 1, so the row's sum is 1 + r). Keeping the 1 apart lets the
// result use log1p(r): a confident row's small loss keeps its precision.
// The threads' (m, r) merge per simdgroup (simd_max; the lowest lane
// holding the max stays the designated one; simd_sum of the rescaled rest)
// (a butterfly) and then across simdgroups through threadgroup memory, in a
// fixed order.
//   lse = m + log1p(r),  loss = (m − x[t]) + log1p(r)  (0 where t == ignore)
// A row holding NaN or +Inf, or only −Inf, gives lse NaN and loss NaN
// (unless ignored), as on the CPU and in PyTorch. (V = 0 is never launched.)
//
// Backward: dlogits = scale·(softmax − onehot(t)), rows with t == ignore
// zero. The softmax is rebuilt from the row itself, not from the saved lse
// (whose rounding to float32 would scale every probability by up to
// |lse|·6e-8, which the CPU backend removes by renormalising): pass 1
// keeps an online max M and S_o = Σ_{j≠t} e_j with e_j = exp(x_j − M),
// merged like the forward's; with S = S_o + e_t, pass 2 writes
// dl_j = e_j·scale/S and dl_t = −scale·S_o/S, which has no cancellation
// where p_t ≈ 1. A row holding NaN or +Inf, or only −Inf, has no such S:
// it is written from the saved lse unnormalised, scale·exp(x_j − lse) and
// scale·(exp(x_t − lse) − 1), as on the CPU (NaN with forge's lse).
// Every thread reads x[t] before the reduction's barrier and writes only
// its own elements after it, so dlogits may be the logits' own buffer
// (the in-place update of llm.c).
//
// The backward's scale is p.scale, times the upstream gradient g[0]
// (buffer 5, float32) with the constant ce_upstream — the loss's gradient
// read on the device, so that a backward never waits for it.
//
// A target outside [0, V) that is not ignore (forge rejects those) gives a
// NaN loss / NaN gradient row rather than an out-of-bounds read.
//
// Function constants:
//   0 ce_upstream (bool): cross_entropy_backward_*: multiply the scale by
//                         g[0].
#include <metal_stdlib>
using namespace metal;

constant bool ce_upstream [[function_constant(0)]];

enum : uint { CE_MAX_SIMDGROUPS = 32 };
enum : uint { CE_WRITE_LOSS = 1, CE_WRITE_LSE = 2, CE_HAS_IGNORE = 4 };

struct CrossEntropyParams {
    uint rows;    // N (threadgroups)
    uint cols;    // V
    int tstride;  // stride of targets
    int ignore;   // the ignored target (if flags & CE_HAS_IGNORE)
    float scale;  // backward: the gradient's factor
    uint flags;   // CE_WRITE_LOSS, CE_WRITE_LSE (forward), CE_HAS_IGNORE
};

// Storage types: loads widen to float32 (forge_widen, exact); stores round
// once (forge_narrow: the prelude, forge_half.h).

// ce_log1p is log(1 + r) for r ≥ 0, accurate for small r (Goldberg's
// correction: the rounding of 1 + r cancels in log(u)·r/(u − 1)).
static inline float ce_log1p(float r) {
    float u = 1.0f + r;
    if (u == 1.0f) {
        return r;
    }
    if (isinf(u)) {
        return log(u);
    }
    return log(u) * (r / (u - 1.0f));
}

// ce_simd_sum adds x over the simdgroup as a butterfly (a tree of depth 5:
// rounding error grows with log2 of the lanes, not their number); every
// lane gets the same bits, as float addition is commutative.
static inline float ce_simd_sum(float x) {
    for (ushort m = 16; m >= 1; m >>= 1) {
        x += as_type<float>(simd_shuffle_xor(as_type<uint>(x), m));
    }
    return x;
}

// ce_merge_simd merges the lanes' (m, r): returns the simdgroup's max in m
// and its rest-sum in r (the designated max is the lowest lane holding it;
// a lane with m = −Inf holds nothing).
static inline void ce_merge_simd(thread float& m, thread float& r, uint lane) {
    float mm = simd_max(m);
    uint first = simd_min(m == mm ? lane : 0xffffffffu);
    float c;
    if (lane == first) {
        c = r;
    } else if (m == -INFINITY) {
        c = 0.0f;
    } else {
        c = (1.0f + r) * exp(m - mm);
    }
    m = mm;
    r = ce_simd_sum(c);
}

template <typename T>
kernel void cross_entropy_t(device float* loss [[buffer(0)]],
                            device float* lse [[buffer(1)]],
                            const device T* logits [[buffer(2)]],
                            const device int* targets [[buffer(3)]],
                            constant CrossEntropyParams& p [[buffer(4)]],
                            uint3 tgpos [[threadgroup_position_in_grid]],
                            uint3 ntg [[threadgroups_per_grid]],
                            uint tid [[thread_index_in_threadgroup]],
                            uint tsize [[threads_per_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]],
                            uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float part_m[CE_MAX_SIMDGROUPS];
    threadgroup float part_r[CE_MAX_SIMDGROUPS];
    threadgroup uint part_bad[CE_MAX_SIMDGROUPS];

    const uint row = tgpos.y * ntg.x + tgpos.x;
    if (row >= p.rows) {
        return; // the whole threadgroup: no barrier is left waiting
    }
    const device T* xr = logits + ulong(row) * p.cols;

    float m = -INFINITY;
    float r = 0.0f;
    uint bad = 0;
    for (uint j = tid; j < p.cols; j += tsize) {
        float v = forge_widen(xr[j]);
        if (isnan(v) || v == INFINITY) {
            bad = 1;
        } else if (v > m) {
            r = m == -INFINITY ? 0.0f : (1.0f + r) * exp(m - v);
            m = v;
        } else if (v != -INFINITY) {
            r += exp(v - m);
        }
    }
    ce_merge_simd(m, r, lane);
    bad = simd_max(bad);
    if (nsg > 1) {
        if (lane == 0) {
            part_m[sg] = m;
            part_r[sg] = r;
            part_bad[sg] = bad;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        m = lane < nsg ? part_m[lane] : -INFINITY;
        r = lane < nsg ? part_r[lane] : 0.0f;
        ce_merge_simd(m, r, lane);
        bad = simd_max(lane < nsg ? part_bad[lane] : 0u);
    }
    if (tid != 0) {
        return;
    }
    const int t = targets[int(row) * p.tstride];
    const bool ignored = (p.flags & CE_HAS_IGNORE) != 0 && t == p.ignore;
    float e; // lse
    float l; // loss
    if (bad != 0 || m == -INFINITY) {
        e = NAN;
        l = NAN;
    } else {
        float l1p = ce_log1p(r);
        e = m + l1p;
        l = uint(t) < p.cols ? (m - forge_widen(xr[t])) + l1p : NAN;
    }
    if ((p.flags & CE_WRITE_LOSS) != 0) {
        loss[row] = ignored ? 0.0f : l;
    }
    if ((p.flags & CE_WRITE_LSE) != 0) {
        lse[row] = e;
    }
}

// ce_merge_rest merges the lanes' (m, acc) of the backward: returns the
// simdgroup's max in m and Σ acc·exp(m_lane − m) in acc. NaN propagates; a
// lane with m = −Inf holds nothing.
static inline void ce_merge_rest(thread float& m, thread float& acc) {
    float mm = simd_max(m);
    float c = isnan(acc) ? acc : (m == -INFINITY ? 0.0f : acc * exp(m - mm));
    m = mm;
    acc = ce_simd_sum(c);
}

template <typename T>
kernel void cross_entropy_backward_t(device T* dlogits [[buffer(0)]],
                                     const device T* logits [[buffer(1)]],
                                     const device float* lse [[buffer(2)]],
                                     const device int* targets [[buffer(3)]],
                                     constant CrossEntropyParams& p [[buffer(4)]],
                                     const device float* g [[buffer(5)]],
                                     uint3 tgpos [[threadgroup_position_in_grid]],
                                     uint3 ntg [[threadgroups_per_grid]],
                                     uint tid [[thread_index_in_threadgroup]],
                                     uint tsize [[threads_per_threadgroup]],
                                     uint lane [[thread_index_in_simdgroup]],
                                     uint sg [[simdgroup_index_in_threadgroup]],
                                     uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float part_m[CE_MAX_SIMDGROUPS];
    threadgroup float part_a[CE_MAX_SIMDGROUPS];

    const uint row = tgpos.y * ntg.x + tgpos.x;
    if (row >= p.rows) {
        return;
    }
    const device T* xr = logits + ulong(row) * p.cols;
    device T* dr = dlogits + ulong(row) * p.cols;
    const int t = targets[int(row) * p.tstride];
    const float scale = ce_upstream ? p.scale * g[0] : p.scale;

    // Uniform over the threadgroup: no barrier is left waiting.
    if ((p.flags & CE_HAS_IGNORE) != 0 && t == p.ignore) {
        for (uint j = tid; j < p.cols; j += tsize) {
            dr[j] = forge_narrow<T>(0.0f);
        }
        return;
    }
    if (uint(t) >= p.cols) {
        for (uint j = tid; j < p.cols; j += tsize) {
            dr[j] = forge_narrow<T>(NAN);
        }
        return;
    }

    // Pass 1: the row max M (every thread starts from x[t]) and
    // S_o = Σ_{j≠t} exp(x_j − M), online; NaN or +Inf anywhere makes S_o NaN.
    const float xt = forge_widen(xr[t]); // read before any thread writes the row
    const bool xt_bad = isnan(xt) || xt == INFINITY;
    float m = isnan(xt) ? -INFINITY : xt;
    float acc = xt_bad ? NAN : 0.0f;
    for (uint j = tid; j < p.cols; j += tsize) {
        if (j == uint(t)) {
            continue;
        }
        float v = forge_widen(xr[j]);
        if (isnan(v) || v == INFINITY) {
            acc = NAN;
        } else if (v > m) {
            acc = (m == -INFINITY ? 0.0f : acc * exp(m - v)) + 1.0f;
            m = v;
        } else if (v != -INFINITY) {
            acc += exp(v - m);
        }
    }
    ce_merge_rest(m, acc);
    if (nsg > 1) {
        if (lane == 0) {
            part_m[sg] = m;
            part_a[sg] = acc;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        m = lane < nsg ? part_m[lane] : -INFINITY;
        acc = lane < nsg ? part_a[lane] : 0.0f;
        ce_merge_rest(m, acc);
    }
    const float so = acc;
    const float s = so + exp(xt - m);

    // Pass 2.
    if (s > 0.0f && s < INFINITY) {
        const float f = scale / s;
        for (uint j = tid; j < p.cols; j += tsize) {
            dr[j] = forge_narrow<T>(j == uint(t) ? -(so * f) : exp(forge_widen(xr[j]) - m) * f);
        }
    } else {
        const float L = lse[row];
        for (uint j = tid; j < p.cols; j += tsize) {
            dr[j] = forge_narrow<T>(j == uint(t) ? scale * (exp(xt - L) - 1.0f) : scale * exp(forge_widen(xr[j]) - L));
        }
    }
}

template [[host_name("cross_entropy_f32")]] [[kernel]] void cross_entropy_t<float>(device float*, device float*, const device float*, const device int*, constant CrossEntropyParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("cross_entropy_f16")]] [[kernel]] void cross_entropy_t<half>(device float*, device float*, const device half*, const device int*, constant CrossEntropyParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("cross_entropy_bf16")]] [[kernel]] void cross_entropy_t<bfloat>(device float*, device float*, const device bfloat*, const device int*, constant CrossEntropyParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("cross_entropy_backward_f32")]] [[kernel]] void cross_entropy_backward_t<float>(device float*, const device float*, const device float*, const device int*, constant CrossEntropyParams&, const device float*, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("cross_entropy_backward_f16")]] [[kernel]] void cross_entropy_backward_t<half>(device half*, const device half*, const device float*, const device int*, constant CrossEntropyParams&, const device float*, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("cross_entropy_backward_bf16")]] [[kernel]] void cross_entropy_backward_t<bfloat>(device bfloat*, const device bfloat*, const device float*, const device int*, constant CrossEntropyParams&, const device float*, uint3, uint3, uint, uint, uint, uint, uint);
