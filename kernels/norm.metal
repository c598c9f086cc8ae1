// norm.metal — Backend.RMSNorm, RMSNormBackward, LayerNorm and
// LayerNormBackward over the last axis of x (N, C), contiguous, float32
// arithmetic; the views that may be 16-bit are float32, float16 or bfloat16
// (see "Storage types" below).
//
// Row kernels (rms_norm_*, rms_norm_backward_*, layer_norm_*,
// layer_norm_backward_*) run one row per threadgroup, or one row per
// simdgroup for short rows (function constant norm_simd_rows; then a
// threadgroup of k simdgroups takes k consecutive rows and no threadgroup
// memory or barrier is used). Rows are numbered x-fastest over a 2-D grid
// of threadgroups so that more than 65535 fit. Every row sum is compensated
// (each thread keeps its rounding errors, the lanes combine in a fixed
// butterfly of two-sums through simd_shuffle_xor, the simdgroups through
// threadgroup memory in simdgroup order), so results are deterministic and
// close to the CPU's float64 sums.
//
//   RMSNorm:       rstd = 1/√(Σx²/C + eps),  y = x·rstd·w
//                  (if Σx² overflows in a finite row, |x| ≳ 1.8e19, a
//                  rare second pass sums (x/max|x|)² instead; LayerNorm's
//                  variance likewise)
//   RMSNorm bwd:   g = dy·w,  dx = rstd·(g − x·rstd²·Σ(g·x)/C)
//   LayerNorm:     μ = Σx/C (kept as a float pair μ_hi + μ_lo),
//                  σ² = Σ(x−μ)²/C (two-pass), rstd = 1/√(σ² + eps),
//                  y = (x−μ)·rstd·w + b
//   LayerNorm bwd: g = dy·w, x̂ = (x−μ)·rstd,
//                  dx = rstd·(g − Σg/C − x̂·rstd·Σ(g·(x−μ))/C)
//
// The weight and bias gradients are column sums over the rows; they are
// deterministic without atomics: norm_param_grad_* sums fixed blocks of
// rows per column into compensated float32 partials (nblocks, C) (each
// product's rounding error kept too), norm_col_sum_* adds the partials of a
// column in block order. The blocking depends on N and C only (ops_norm.go).
//
//   dw_j = Σ_r dy_rj·x̂_rj (x̂ = x·rstd for RMSNorm, (x−μ)·rstd for LayerNorm)
//   db_j = Σ_r dy_rj
//
// Storage types. Every kernel is a template over H, the call's 16-bit type
// (half or bfloat; float for the all-float32 kernels, *_f32). In the _f16
// and _bf16 instances each of x (and dx), y (forward) or dy (backward), and
// w and b is bound as bytes and is float or H as function constants 6–8
// say; mean, rstd and the partials are float32 always. Loads widen to
// float32 (exactly), the arithmetic is the float32 kernels' operation for
// operation, and a 16-bit output is rounded once on store (to nearest
// even). Both are the prelude's forge_widen and forge_narrow
// (forge_half.h). So a 16-bit kernel's float32 results (rstd, mean,
// float32 outputs) are bit for bit those of the float32 kernel on the
// widened inputs, and its 16-bit outputs are those rounded once. The
// *_f32 instances never read constants 6–8.
// norm_col_sum_* is a template over the gradient's type (float32 sums,
// rounded once at the end).
//
// Instances: rms_norm_f32 _f16 _bf16, rms_norm_backward_f32 _f16 _bf16,
// layer_norm_f32 _f16 _bf16, layer_norm_backward_f32 _f16 _bf16,
// norm_param_grad_f32 _f16 _bf16 (by the 16-bit type of x and dy),
// norm_col_sum_f32 _f16 _bf16 (by the type of dw and db).
//
// Function constants:
//   0 norm_simd_rows (bool): row kernels: one row per simdgroup (else one
//                            row per threadgroup).
//   1 norm_has_w     (bool): w is bound (else w = 1).
//   2 norm_has_b     (bool): layer_norm_*: b is bound (else b = 0).
//   3 norm_layer     (bool): norm_param_grad_*: x̂ = (x−μ)·rstd (LayerNorm)
//                            rather than x·rstd (RMSNorm).
//   4 norm_want_dw   (bool): norm_param_grad_*: write dw partials.
//   5 norm_want_db   (bool): norm_param_grad_*: write db partials.
//   6 norm_x16       (bool): _f16/_bf16 instances: x (and dx) hold H.
//   7 norm_y16       (bool): _f16/_bf16 instances: y (forward), dy
//                            (backward, param grads) hold H.
//   8 norm_w16       (bool): _f16/_bf16 row kernels: w and b hold H.
#include <metal_stdlib>
using namespace metal;

enum : uint { NORM_MAX_SIMDGROUPS = 32 };

// NormParams is the parameter block of every kernel here.
struct NormParams {
    uint rows;      // N
    uint cols;      // C (≥ 1)
    float eps;      // forward kernels
    uint save;      // forward kernels: bit 0 write mean (LayerNorm), bit 1 rstd
    uint nblocks;   // param-grad kernels: number of row blocks
    uint block;     // norm_param_grad_*: rows per block
};

constant bool norm_simd_rows [[function_constant(0)]];
constant bool norm_has_w [[function_constant(1)]];
constant bool norm_has_b [[function_constant(2)]];
constant bool norm_layer [[function_constant(3)]];
constant bool norm_want_dw [[function_constant(4)]];
constant bool norm_want_db [[function_constant(5)]];
constant bool norm_x16 [[function_constant(6)]];
constant bool norm_y16 [[function_constant(7)]];
constant bool norm_w16 [[function_constant(8)]];

// NormAcc is a compensated sum: s plus the rounding errors c of making it.
struct NormAcc {
    float s;
    float c;
};

static inline NormAcc norm_acc0() {
    NormAcc a;
    a.s = 0.0f;
    a.c = 0.0f;
    return a;
}

// norm_add adds x to a (two-sum; symmetric, so lanes that add the same pair
// agree bit for bit). Non-finite sums keep no compensation.
static inline void norm_add(thread NormAcc& a, float x) {
    float t = a.s + x;
    if (isfinite(t)) {
        a.c += fabs(a.s) >= fabs(x) ? (a.s - t) + x : (x - t) + a.s;
    }
    a.s = t;
}

static inline NormAcc norm_merge(NormAcc a, NormAcc b) {
    a.c += b.c;
    norm_add(a, b.s);
    return a;
}

static inline float norm_value(NormAcc a) { return isfinite(a.s) ? a.s + a.c : a.s; }

// norm_simd combines the lanes' sums with a butterfly: every lane ends with
// the same total. (s, c) travel as one 64-bit shuffle (simd_shuffle_xor
// takes integer types only).
static inline NormAcc norm_simd(NormAcc a) {
    for (ushort m = 16; m >= 1; m >>= 1) {
        float2 o = as_type<float2>(simd_shuffle_xor(as_type<uint2>(float2(a.s, a.c)), m));
        NormAcc b;
        b.s = o.x;
        b.c = o.y;
        a = norm_merge(a, b);
    }
    return a;
}

// norm_simd2 is norm_simd of two sums at once.
static inline void norm_simd2(thread NormAcc& a, thread NormAcc& q) {
    for (ushort m = 16; m >= 1; m >>= 1) {
        float4 o = as_type<float4>(simd_shuffle_xor(as_type<uint4>(float4(a.s, a.c, q.s, q.c)), m));
        NormAcc b;
        b.s = o.x;
        b.c = o.y;
        a = norm_merge(a, b);
        b.s = o.z;
        b.c = o.w;
        q = norm_merge(q, b);
    }
}

// norm_total is the row total of every thread's a: the simdgroup's
// butterfly, then (one row per threadgroup) the simdgroups' totals through
// ps/pc in simdgroup order. Every thread gets the total. ps/pc must not be
// reused by the threadgroup afterwards without a barrier.
static inline float norm_total(NormAcc a, threadgroup float* ps, threadgroup float* pc,
                               uint lane, uint sg, uint nsg) {
    a = norm_simd(a);
    if (!norm_simd_rows && nsg > 1) {
        if (lane == 0) {
            ps[sg] = a.s;
            pc[sg] = a.c;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        NormAcc b = norm_acc0();
        if (lane < nsg) {
            b.s = ps[lane];
            b.c = pc[lane];
        }
        a = norm_simd(b);
    }
    return norm_value(a);
}

// norm_row_max is the row maximum of every thread's v (simd_max, then the
// simdgroups' maxima through pm). Every thread gets it.
static inline float norm_row_max(float v, threadgroup float* pm, uint lane, uint sg, uint nsg) {
    v = simd_max(v);
    if (!norm_simd_rows && nsg > 1) {
        if (lane == 0) {
            pm[sg] = v;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        v = simd_max(lane < nsg ? pm[lane] : 0.0f);
    }
    return v;
}

// NormRow locates this thread's row: its index, the thread's first column
// and the column stride. ok is false past the last row.
struct NormRow {
    uint row;
    uint j0;
    uint step;
    bool ok;
};

static inline NormRow norm_row(constant NormParams& p, uint3 tgpos, uint3 ntg, uint tid,
                               uint tsize, uint lane, uint sg, uint nsg) {
    NormRow r;
    uint g = tgpos.y * ntg.x + tgpos.x;
    if (norm_simd_rows) {
        r.row = g * nsg + sg;
        r.j0 = lane;
        r.step = 32;
    } else {
        r.row = g;
        r.j0 = tid;
        r.step = tsize;
    }
    r.ok = r.row < p.rows;
    return r;
}

// NormIO<H> says which views hold H: function constants 6–8 in the 16-bit
// instances; none in the float32 ones (which so never read the constants).
template <typename H> struct NormIO {
    static inline bool x16() { return norm_x16; }
    static inline bool y16() { return norm_y16; }
    static inline bool w16() { return norm_w16; }
};
template <> struct NormIO<float> {
    static inline bool x16() { return false; }
    static inline bool y16() { return false; }
    static inline bool w16() { return false; }
};

// norm_ld reads element i of a view bound as bytes: H if h, else float.
template <typename H> static inline float norm_ld(const device uchar* v, bool h, ulong i) {
    if (h) {
        return forge_widen(((const device H*)v)[i]);
    }
    return ((const device float*)v)[i];
}

// norm_st writes element i of a view bound as bytes: H (rounded once) if
// h, else float.
template <typename H> static inline void norm_st(device uchar* v, bool h, ulong i, float x) {
    if (h) {
        ((device H*)v)[i] = forge_narrow<H>(x);
    } else {
        ((device float*)v)[i] = x;
    }
}

template <typename H>
kernel void rms_norm_t(device uchar* y [[buffer(0)]],
                       device float* rstd [[buffer(1)]],
                       const device uchar* x [[buffer(2)]],
                       const device uchar* w [[buffer(3)]],
                       constant NormParams& p [[buffer(4)]],
                       uint3 tgpos [[threadgroup_position_in_grid]],
                       uint3 ntg [[threadgroups_per_grid]],
                       uint tid [[thread_index_in_threadgroup]],
                       uint tsize [[threads_per_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]],
                       uint sg [[simdgroup_index_in_threadgroup]],
                       uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float ps[NORM_MAX_SIMDGROUPS];
    threadgroup float pc[NORM_MAX_SIMDGROUPS];
    threadgroup float pm[NORM_MAX_SIMDGROUPS]; // the rare rescaled path
    threadgroup float ps3[NORM_MAX_SIMDGROUPS];
    threadgroup float pc3[NORM_MAX_SIMDGROUPS];
    const bool x16 = NormIO<H>::x16();
    const bool y16 = NormIO<H>::y16();
    const bool w16 = NormIO<H>::w16();

    NormRow r = norm_row(p, tgpos, ntg, tid, tsize, lane, sg, nsg);
    if (!r.ok) {
        return; // a whole threadgroup, or (simd rows) a whole simdgroup
    }
    const ulong base = ulong(r.row) * p.cols;

    NormAcc a = norm_acc0();
    for (uint j = r.j0; j < p.cols; j += r.step) {
        float v = norm_ld<H>(x, x16, base + j);
        norm_add(a, v * v);
    }
    float ss = norm_total(a, ps, pc, lane, sg, nsg);
    float rs = 1.0f / sqrt(ss / float(p.cols) + p.eps);
    if (ss == INFINITY) {
        // x² overflowed (|x| ≳ 1.8e19) or x holds ±Inf: with a finite row
        // maximum m, sum (x/m)² instead, rstd = (1/m)/√(Σ(x/m)²/C + eps/m²).
        // The same for every thread of the row, so the barrier is uniform.
        float mx = 0.0f;
        for (uint j = r.j0; j < p.cols; j += r.step) {
            mx = max(mx, fabs(norm_ld<H>(x, x16, base + j)));
        }
        mx = norm_row_max(mx, pm, lane, sg, nsg);
        if (isfinite(mx)) {
            const float inv = 1.0f / mx;
            NormAcc q = norm_acc0();
            for (uint j = r.j0; j < p.cols; j += r.step) {
                float v = norm_ld<H>(x, x16, base + j) * inv;
                norm_add(q, v * v);
            }
            float sq = norm_total(q, ps3, pc3, lane, sg, nsg);
            rs = inv / sqrt(sq / float(p.cols) + (p.eps * inv) * inv);
        }
    }
    if ((p.save & 2u) != 0 && r.j0 == 0) {
        rstd[r.row] = rs;
    }
    for (uint j = r.j0; j < p.cols; j += r.step) {
        float v = norm_ld<H>(x, x16, base + j) * rs;
        norm_st<H>(y, y16, base + j, norm_has_w ? v * norm_ld<H>(w, w16, j) : v);
    }
}

template <typename H>
kernel void rms_norm_backward_t(device uchar* dx [[buffer(0)]],
                                const device uchar* dy [[buffer(1)]],
                                const device uchar* x [[buffer(2)]],
                                const device uchar* w [[buffer(3)]],
                                const device float* rstd [[buffer(4)]],
                                constant NormParams& p [[buffer(5)]],
                                uint3 tgpos [[threadgroup_position_in_grid]],
                                uint3 ntg [[threadgroups_per_grid]],
                                uint tid [[thread_index_in_threadgroup]],
                                uint tsize [[threads_per_threadgroup]],
                                uint lane [[thread_index_in_simdgroup]],
                                uint sg [[simdgroup_index_in_threadgroup]],
                                uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float ps[NORM_MAX_SIMDGROUPS];
    threadgroup float pc[NORM_MAX_SIMDGROUPS];
    const bool x16 = NormIO<H>::x16();
    const bool y16 = NormIO<H>::y16();
    const bool w16 = NormIO<H>::w16();

    NormRow r = norm_row(p, tgpos, ntg, tid, tsize, lane, sg, nsg);
    if (!r.ok) {
        return;
    }
    const ulong base = ulong(r.row) * p.cols;

    NormAcc a = norm_acc0();
    for (uint j = r.j0; j < p.cols; j += r.step) {
        float gy = norm_ld<H>(dy, y16, base + j);
        float g = norm_has_w ? gy * norm_ld<H>(w, w16, j) : gy;
        norm_add(a, g * norm_ld<H>(x, x16, base + j));
    }
    float sgx = norm_total(a, ps, pc, lane, sg, nsg);
    float rs = rstd[r.row];
    float k = ((sgx / float(p.cols)) * rs) * rs; // in this order: rs² may underflow
    for (uint j = r.j0; j < p.cols; j += r.step) {
        float gy = norm_ld<H>(dy, y16, base + j);
        float g = norm_has_w ? gy * norm_ld<H>(w, w16, j) : gy;
        norm_st<H>(dx, x16, base + j, rs * (g - norm_ld<H>(x, x16, base + j) * k));
    }
}

template <typename H>
kernel void layer_norm_t(device uchar* y [[buffer(0)]],
                         device float* mean [[buffer(1)]],
                         device float* rstd [[buffer(2)]],
                         const device uchar* x [[buffer(3)]],
                         const device uchar* w [[buffer(4)]],
                         const device uchar* b [[buffer(5)]],
                         constant NormParams& p [[buffer(6)]],
                         uint3 tgpos [[threadgroup_position_in_grid]],
                         uint3 ntg [[threadgroups_per_grid]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint tsize [[threads_per_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]],
                         uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float ps1[NORM_MAX_SIMDGROUPS];
    threadgroup float pc1[NORM_MAX_SIMDGROUPS];
    threadgroup float ps2[NORM_MAX_SIMDGROUPS];
    threadgroup float pc2[NORM_MAX_SIMDGROUPS];
    threadgroup float pm[NORM_MAX_SIMDGROUPS]; // the rare rescaled path
    threadgroup float ps3[NORM_MAX_SIMDGROUPS];
    threadgroup float pc3[NORM_MAX_SIMDGROUPS];
    const bool x16 = NormIO<H>::x16();
    const bool y16 = NormIO<H>::y16();
    const bool w16 = NormIO<H>::w16();

    NormRow r = norm_row(p, tgpos, ntg, tid, tsize, lane, sg, nsg);
    if (!r.ok) {
        return;
    }
    const ulong base = ulong(r.row) * p.cols;
    const float fc = float(p.cols);

    // Pass 1: the mean as a float pair mh + ml (so x − μ does not lose the
    // mean's rounding error when |μ| is large against the spread).
    NormAcc a = norm_acc0();
    for (uint j = r.j0; j < p.cols; j += r.step) {
        norm_add(a, norm_ld<H>(x, x16, base + j));
    }
    a = norm_simd(a);
    if (!norm_simd_rows && nsg > 1) {
        if (lane == 0) {
            ps1[sg] = a.s;
            pc1[sg] = a.c;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        NormAcc o = norm_acc0();
        if (lane < nsg) {
            o.s = ps1[lane];
            o.c = pc1[lane];
        }
        a = norm_simd(o);
    }
    float mh = norm_value(a) / fc;
    float ml = 0.0f;
    if (isfinite(a.s) && isfinite(mh)) {
        ml = (fma(-mh, fc, a.s) + a.c) / fc; // (Σ − mh·C)/C
    }

    // Pass 2: the variance about the mean.
    NormAcc q = norm_acc0();
    for (uint j = r.j0; j < p.cols; j += r.step) {
        float d = (norm_ld<H>(x, x16, base + j) - mh) - ml;
        norm_add(q, d * d);
    }
    float vs = norm_total(q, ps2, pc2, lane, sg, nsg);
    float rs = 1.0f / sqrt(vs / fc + p.eps);
    if (vs == INFINITY) {
        // (x − μ)² overflowed: as in rms_norm_t, scale by the largest
        // |x − μ| when it is finite.
        float mx = 0.0f;
        for (uint j = r.j0; j < p.cols; j += r.step) {
            mx = max(mx, fabs((norm_ld<H>(x, x16, base + j) - mh) - ml));
        }
        mx = norm_row_max(mx, pm, lane, sg, nsg);
        if (isfinite(mx)) {
            const float inv = 1.0f / mx;
            NormAcc q3 = norm_acc0();
            for (uint j = r.j0; j < p.cols; j += r.step) {
                float d = ((norm_ld<H>(x, x16, base + j) - mh) - ml) * inv;
                norm_add(q3, d * d);
            }
            float sq = norm_total(q3, ps3, pc3, lane, sg, nsg);
            rs = inv / sqrt(sq / fc + (p.eps * inv) * inv);
        }
    }
    if (r.j0 == 0) {
        if ((p.save & 1u) != 0) {
            mean[r.row] = mh + ml;
        }
        if ((p.save & 2u) != 0) {
            rstd[r.row] = rs;
        }
    }

    // Pass 3.
    for (uint j = r.j0; j < p.cols; j += r.step) {
        float v = ((norm_ld<H>(x, x16, base + j) - mh) - ml) * rs;
        if (norm_has_w) {
            v *= norm_ld<H>(w, w16, j);
        }
        if (norm_has_b) {
            v += norm_ld<H>(b, w16, j);
        }
        norm_st<H>(y, y16, base + j, v);
    }
}

template <typename H>
kernel void layer_norm_backward_t(device uchar* dx [[buffer(0)]],
                                  const device uchar* dy [[buffer(1)]],
                                  const device uchar* x [[buffer(2)]],
                                  const device uchar* w [[buffer(3)]],
                                  const device float* mean [[buffer(4)]],
                                  const device float* rstd [[buffer(5)]],
                                  constant NormParams& p [[buffer(6)]],
                                  uint3 tgpos [[threadgroup_position_in_grid]],
                                  uint3 ntg [[threadgroups_per_grid]],
                                  uint tid [[thread_index_in_threadgroup]],
                                  uint tsize [[threads_per_threadgroup]],
                                  uint lane [[thread_index_in_simdgroup]],
                                  uint sg [[simdgroup_index_in_threadgroup]],
                                  uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float ps1[NORM_MAX_SIMDGROUPS];
    threadgroup float pc1[NORM_MAX_SIMDGROUPS];
    threadgroup float ps2[NORM_MAX_SIMDGROUPS];
    threadgroup float pc2[NORM_MAX_SIMDGROUPS];
    const bool x16 = NormIO<H>::x16();
    const bool y16 = NormIO<H>::y16();
    const bool w16 = NormIO<H>::w16();

    NormRow r = norm_row(p, tgpos, ntg, tid, tsize, lane, sg, nsg);
    if (!r.ok) {
        return;
    }
    const ulong base = ulong(r.row) * p.cols;
    const float mu = mean[r.row];
    const float rs = rstd[r.row];

    // Σg and Σg·(x − μ), both in one pass.
    NormAcc a = norm_acc0();
    NormAcc q = norm_acc0();
    for (uint j = r.j0; j < p.cols; j += r.step) {
        float gy = norm_ld<H>(dy, y16, base + j);
        float g = norm_has_w ? gy * norm_ld<H>(w, w16, j) : gy;
        norm_add(a, g);
        norm_add(q, g * (norm_ld<H>(x, x16, base + j) - mu));
    }
    norm_simd2(a, q);
    if (!norm_simd_rows && nsg > 1) {
        if (lane == 0) {
            ps1[sg] = a.s;
            pc1[sg] = a.c;
            ps2[sg] = q.s;
            pc2[sg] = q.c;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        NormAcc a1 = norm_acc0();
        NormAcc q1 = norm_acc0();
        if (lane < nsg) {
            a1.s = ps1[lane];
            a1.c = pc1[lane];
            q1.s = ps2[lane];
            q1.c = pc2[lane];
        }
        a = a1;
        q = q1;
        norm_simd2(a, q);
    }
    const float fc = float(p.cols);
    const float mg = norm_value(a) / fc;        // mean of g
    const float mgx = norm_value(q) * rs / fc;  // mean of g·x̂
    for (uint j = r.j0; j < p.cols; j += r.step) {
        float gy = norm_ld<H>(dy, y16, base + j);
        float g = norm_has_w ? gy * norm_ld<H>(w, w16, j) : gy;
        float xh = (norm_ld<H>(x, x16, base + j) - mu) * rs;
        norm_st<H>(dx, x16, base + j, rs * ((g - mg) - xh * mgx));
    }
}

// norm_param_grad_t: thread (column j, row block k) sums its column over
// rows k·block … min((k+1)·block, N) − 1 in order. Grid: x over columns,
// y over the nblocks row blocks. part (float32) holds, for dw and then db
// (those wanted), two planes (nblocks, C): the partial sums and their
// compensations. dy and x are float or H (constants 7 and 6).
template <typename H>
kernel void norm_param_grad_t(device float* part [[buffer(0)]],
                              const device uchar* dy [[buffer(1)]],
                              const device uchar* x [[buffer(2)]],
                              const device float* mean [[buffer(3)]],
                              const device float* rstd [[buffer(4)]],
                              constant NormParams& p [[buffer(5)]],
                              uint2 gid [[thread_position_in_grid]]) {
    const bool x16 = NormIO<H>::x16();
    const bool y16 = NormIO<H>::y16();
    const uint j = gid.x;
    const uint k = gid.y;
    if (j >= p.cols || k >= p.nblocks) {
        return;
    }
    const uint r0 = k * p.block;
    const uint r1 = min(r0 + p.block, p.rows);
    NormAcc aw = norm_acc0();
    NormAcc ab = norm_acc0();
    for (uint r = r0; r < r1; r++) {
        const ulong i = ulong(r) * p.cols + j;
        const float g = norm_ld<H>(dy, y16, i);
        if (norm_want_dw) {
            // g·(x − μ)·rstd with the rounding errors of the subtraction
            // and both products kept in the compensation.
            float xv = norm_ld<H>(x, x16, i);
            float de = 0.0f;
            if (norm_layer) {
                float mu = -mean[r];
                float d = xv + mu;
                float bb = d - xv;
                de = (xv - (d - bb)) + (mu - bb);
                xv = d;
            }
            const float rs = rstd[r];
            const float a = g * xv;
            const float ae = fma(g, xv, -a) + g * de;
            const float t = a * rs;
            const float te = fma(a, rs, -t) + ae * rs;
            norm_add(aw, t);
            if (isfinite(t)) {
                aw.c += te;
            }
        }
        if (norm_want_db) {
            norm_add(ab, g);
        }
    }
    // Each partial as its pair (s, c): rounding it to one float would add an
    // error of its own per block.
    const ulong plane = ulong(p.nblocks) * p.cols;
    ulong o = ulong(k) * p.cols + j;
    if (norm_want_dw) {
        part[o] = aw.s;
        part[o + plane] = isfinite(aw.s) ? aw.c : 0.0f;
        o += 2 * plane;
    }
    if (norm_want_db) {
        part[o] = ab.s;
        part[o + plane] = isfinite(ab.s) ? ab.c : 0.0f;
    }
}

// norm_col_sum_t: out_j = Σ_k (part[k·C + j] + comp[k·C + j]) over the
// nblocks partials (comp the plane after part), in block order, in float32;
// out (TO: float, half or bfloat) gets the sum rounded once.
template <typename TO>
kernel void norm_col_sum_t(device TO* out [[buffer(0)]],
                           const device float* part [[buffer(1)]],
                           constant NormParams& p [[buffer(2)]],
                           uint j [[thread_position_in_grid]]) {
    if (j >= p.cols) {
        return;
    }
    const ulong plane = ulong(p.nblocks) * p.cols;
    NormAcc a = norm_acc0();
    for (uint k = 0; k < p.nblocks; k++) {
        const ulong o = ulong(k) * p.cols + j;
        norm_add(a, part[o]);
        a.c += part[o + plane];
    }
    out[j] = forge_narrow<TO>(norm_value(a));
}

// Instantiations: *_f32 (every view float32), *_f16 and *_bf16 (the
// call's 16-bit type; which views hold it: function constants 6–8).
template [[host_name("rms_norm_f32")]] [[kernel]] void rms_norm_t<float>(device uchar*, device float*, const device uchar*, const device uchar*, constant NormParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("rms_norm_f16")]] [[kernel]] void rms_norm_t<half>(device uchar*, device float*, const device uchar*, const device uchar*, constant NormParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("rms_norm_bf16")]] [[kernel]] void rms_norm_t<bfloat>(device uchar*, device float*, const device uchar*, const device uchar*, constant NormParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("rms_norm_backward_f32")]] [[kernel]] void rms_norm_backward_t<float>(device uchar*, const device uchar*, const device uchar*, const device uchar*, const device float*, constant NormParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("rms_norm_backward_f16")]] [[kernel]] void rms_norm_backward_t<half>(device uchar*, const device uchar*, const device uchar*, const device uchar*, const device float*, constant NormParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("rms_norm_backward_bf16")]] [[kernel]] void rms_norm_backward_t<bfloat>(device uchar*, const device uchar*, const device uchar*, const device uchar*, const device float*, constant NormParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("layer_norm_f32")]] [[kernel]] void layer_norm_t<float>(device uchar*, device float*, device float*, const device uchar*, const device uchar*, const device uchar*, constant NormParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("layer_norm_f16")]] [[kernel]] void layer_norm_t<half>(device uchar*, device float*, device float*, const device uchar*, const device uchar*, const device uchar*, constant NormParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("layer_norm_bf16")]] [[kernel]] void layer_norm_t<bfloat>(device uchar*, device float*, device float*, const device uchar*, const device uchar*, const device uchar*, constant NormParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("layer_norm_backward_f32")]] [[kernel]] void layer_norm_backward_t<float>(device uchar*, const device uchar*, const device uchar*, const device uchar*, const device float*, const device float*, constant NormParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("layer_norm_backward_f16")]] [[kernel]] void layer_norm_backward_t<half>(device uchar*, const device uchar*, const device uchar*, const device uchar*, const device float*, const device float*, constant NormParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("layer_norm_backward_bf16")]] [[kernel]] void layer_norm_backward_t<bfloat>(device uchar*, const device uchar*, const device uchar*, const device uchar*, const device float*, const device float*, constant NormParams&, uint3, uint3, uint, uint, uint, uint, uint);
template [[host_name("norm_param_grad_f32")]] [[kernel]] void norm_param_grad_t<float>(device float*, const device uchar*, const device uchar*, const device float*, const device float*, constant NormParams&, uint2);
template [[host_name("norm_param_grad_f16")]] [[kernel]] void norm_param_grad_t<half>(device float*, const device uchar*, const device uchar*, const device float*, const device float*, constant NormParams&, uint2);
template [[host_name("norm_param_grad_bf16")]] [[kernel]] void norm_param_grad_t<bfloat>(device float*, const device uchar*, const device uchar*, const device float*, const device float*, constant NormParams&, uint2);
template [[host_name("norm_col_sum_f32")]] [[kernel]] void norm_col_sum_t<float>(device float*, const device float*, constant NormParams&, uint);
template [[host_name("norm_col_sum_f16")]] [[kernel]] void norm_col_sum_t<half>(device half*, const device float*, constant NormParams&, uint);
template [[host_name("norm_col_sum_bf16")]] [[kernel]] void norm_col_sum_t<bfloat>(device bfloat*, const device float*, constant NormParams&, uint);
