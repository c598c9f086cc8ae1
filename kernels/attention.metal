// attention.metal — Backend.Attention and Backend.AttentionBackward: fused
// scaled-dot-product attention, causal or full, with grouped KV heads
// (FlashAttention-2: no (Tq, Tk) matrix is ever stored), on float32,
// float16 or bfloat16 data with float32 arithmetic.
//
// Dtypes: q, k, v, out, dout, dq, dk and dv are all of one type T (float,
// half or bfloat; kernel names end _f32, _f16, _bf16); lse and the delta
// scratch are float32 always. Every 16-bit value is widened (exactly) to
// float32 where it is read — into the staged tiles, the register
// fragments, the reference loops — so S = Q·Kᵀ, the softmax statistics,
// P, dP, dS and every accumulator (O, dQ, dK, dV) are float32, and P and
// dS enter P·V, dS·K, Pᵀ·dO and dSᵀ·Q unrounded (float32 fragments on both
// sides; FlashAttention's CUDA kernels instead round P and dS to the input
// type for 16-bit tensor-core products: not done here). Each 16-bit output
// element is rounded once, to nearest even, where it is stored. A 16-bit
// kernel therefore performs exactly the float32 kernel's arithmetic on the
// widened inputs, in the same order: its outputs are the float32 kernel's
// rounded once (the tests check this bit for bit on the emulator).
//
// Shapes: q, out, dout (B, H, Tq, D); k, v (B, Hkv, Tk, D); lse, delta
// (B, H, Tq); dq (B, H, Tq, D); dk, dv (B, Hkv, Tk, D). Query head h reads
// kv head h / G (G = H / Hkv). q, k, v, out and dout are row-strided: row
// (b, h, t) starts at b·sb + h·sh + t·st (strides in AttnParams, the D
// elements of a row contiguous); lse, delta, dq, dk and dv are contiguous.
// With causal, query i sits at absolute position Tk − Tq + i and sees keys
// 0 … Tk − Tq + i. A row that sees no key gets out = 0, lse = −FLT_MAX and
// dq = 0. Masked scores never enter an exp: their probability is written
// as 0, and running maxima start at the finite ATTN_NEG (never −INFINITY:
// exp(−inf − −inf) is NaN).
//
// Fast path (head dims D = 8, 16, …, 128), simdgroup_float8x8 fragments.
// float32: one instantiation per D, names attention_<part>_d<D>_f32.
// 16-bit: instances at D = 32, 64, 96 and 128 only (attention_<part>_d<D>_f16
// / _bf16), each serving the head dims above the previous one up to its
// own, the call's head dim p.D read at run time (attn_dim): fragments past
// p.D are never loaded, multiplied or stored and the staged tiles are zero
// there, so a head dim runs the same operations as at its own instance
// (the tile geometry BK is the same within each bucket). This bounds the
// emulator's compile of this file, where every instance is fully unrolled
// C++ (measured cold, CPU time: 6 s float32 only; 23 s with a 16-bit
// instance per D; 13 s with these). The fragment loops keep their constant
// trip count and test 8·f < dd inside: an early `break` left clang unable
// to unroll some of them fully (fragments indexed at run time spill). For
// float32, dd is D and the tests fold away. Every simdgroup owns 8 rows; a
// threadgroup has 1–4
// simdgroups (the Go side uses fewer for short Tq or Tk, e.g. decoding).
// Staged blocks are BK = 32 rows at D ≤ 32, else 16 (K + V tiles ≤ 17 KB,
// at most ~23 KB of threadgroup memory per kernel at D = 128).
//
//   attention_fwd: grid (⌈Tq/8n⌉, H, B). Each simdgroup keeps its 8 query
//     rows Q (D/8 fragments) and the output accumulator O (D/8 fragments)
//     in registers. Per block of AttnTile<D>::BK keys staged in threadgroup
//     memory (K and V, zero past Tk): S = Q·Kᵀ (Kᵀ fragments by transposed
//     loads of the staged K), stored to the simdgroup's scratch; then four
//     lanes per row update the running max m and sum l (online softmax) and
//     write P = exp(s·scale − m) (0 where masked); O ← diag(corr)·O (the
//     per-row correction exp(m_old − m_new) applied as an MMA with a
//     diagonal matrix built in threadgroup memory — spec-clean, no lane →
//     element mapping; skipped when every correction is 1), O += P·V. At
//     the end O ← diag(1/l)·O, lse = m + log l. Causal: key blocks past the
//     last row's limit are never staged, and a simdgroup skips a block its
//     rows cannot see; per-element masks run only on blocks that need them.
//   attention_bwd_delta_<dtype> (any D): delta = rowsum(dout ∘ out), one
//     simdgroup per row, compensated (the D term of FlashAttention-2,
//     hoisted out of the loops).
//   attention_bwd_dq: grid as the forward. Each simdgroup keeps Q, dO and
//     the dQ accumulator; per staged K/V block: S = Q·Kᵀ, dP = dO·Vᵀ,
//     P = exp(s·scale − lse), dS = P ∘ (dP − delta), dQ += dS·K; dq =
//     scale·dQ.
//   attention_bwd_dk and attention_bwd_dv (one template, attention_bwd_kv):
//     grid (⌈Tk/8n⌉, Hkv, B). Each simdgroup keeps its 8 key rows K (and, in
//     the dk kernel, V) and one accumulator, dK or dV, in registers, and
//     walks the query blocks (BK rows, staged: Q, dO, lse, and delta for
//     dk) of every query head of its kv group in order: Sᵀ = K·Qᵀ (and
//     dPᵀ = V·dOᵀ for dk; operand roles swapped, so no transposed data),
//     Pᵀ, dSᵀ as above, dV += Pᵀ·dO or dK += dSᵀ·Q; dk = scale·dK. Two
//     kernels rather than one holding K, V, dK and dV: an earlier Metal
//     implementation of this same design spilled 4352 bytes per thread in
//     that kernel, and splitting it took its backward from 9.66 to 7.05 ms
//     per layer at B 64, T 512, H 6, D 64 (an M5 Max; this code has not run
//     on Apple hardware, the split is checked on the emulator only). Every
//     dk/dv row is written by one simdgroup in a fixed order: no atomics,
//     deterministic.
//
// Reference path (any D, including D % 8 ≠ 0, D > 128 and D = 0): one
// thread per row, plain loops (attention_naive_fwd_<dtype> and
// attention_naive_dq_<dtype> per query row, attention_naive_dkv_<dtype> per
// key row, accumulating into its own output rows — float32 ones; the
// 16-bit kernels accumulate in rows of a float32 scratch buffer and round
// into their output rows at the end).
//
// Tile geometry is enumerators (AttnTile), never `constant` variables (a
// program-scope `constant` is a memory object, not a compile-time
// constant: fragment loops over it do not unroll and the fragments spill).
//
// Function constants (every kernel but attention_bwd_delta_<dtype>):
//   0 attn_causal (bool): causal masking (else full attention).
#include <metal_stdlib>
using namespace metal;

enum : uint {
    ATTN_SG = 4,      // most simdgroups per threadgroup (8 rows each)
    ATTN_PAD = 4,     // row padding of the staged tiles (16 bytes)
    ATTN_DELTA_SG = 8 // simdgroups (rows) per threadgroup of attention_bwd_delta_<dtype>
};

// The running maximum of a row that has seen no visible score yet.
#define ATTN_NEG (-0.5f * FLT_MAX)

struct AttnParams {
    uint B, H, Hkv, G;     // batch, query heads, kv heads, H / Hkv
    uint Tq, Tk, D;        // query length, key length, head dim
    float scale;           // multiplies q·k
    uint q_sb, q_sh, q_st; // q (B, H, Tq, D): row (b, h, i) at b·q_sb + h·q_sh + i·q_st
    uint k_sb, k_sh, k_st; // k (B, Hkv, Tk, D)
    uint v_sb, v_sh, v_st; // v (B, Hkv, Tk, D)
    uint o_sb, o_sh, o_st; // out (B, H, Tq, D)
    uint g_sb, g_sh, g_st; // dout (B, H, Tq, D)
};

constant bool attn_causal [[function_constant(0)]];

// AttnTile<D> is the geometry of the fast path at head dim D.
template <uint D> struct AttnTile {
    enum : uint {
        DF = D / 8,              // fragments along D
        BK = D <= 32 ? 32 : 16,  // rows per staged block: keys (fwd, dq), queries (dkv)
        BF = BK / 8,             // fragments along a staged block
        BL = BK / 4,             // elements of a block row per lane (4 lanes per row)
        LDT = D + ATTN_PAD,      // row length of the staged tiles
        LDS = BK + ATTN_PAD,     // row length of the per-simdgroup score scratch
    };
};

// attn_visible reports whether query i (of Tq, at position shift + i)
// sees key j (of Tk).
static inline bool attn_visible(int i, int j, int shift, int tk) {
    return j < tk && (!attn_causal || j <= shift + i);
}

// Storage types: forge_widen reads a stored value as float (exact);
// forge_narrow rounds a float32 result once to the storage type (the
// prelude, forge_half.h).

// attn_load_rows_safe loads the 8 × 8 block at x (rows row0 … row0+7,
// rows ld apart) into m, widened, through the simdgroup's 8×8 scratch:
// rows ≥ nrows and columns ≥ ncols read as 0.
template <typename T>
static inline void attn_load_rows_safe(thread simdgroup_float8x8& m, const device T* x, ulong ld, uint row0,
                                       uint nrows, uint ncols, threadgroup float* scr, uint lane) {
    for (uint e = lane; e < 64; e += 32) {
        const uint r = row0 + e / 8;
        scr[e] = r < nrows && e % 8 < ncols ? forge_widen(x[ulong(r) * ld + e % 8]) : 0.0f;
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_load(m, scr, 8);
    simdgroup_barrier(mem_flags::mem_threadgroup);
}

// attn_load_rows loads the block as attn_load_rows_safe does: a whole float
// block straight from memory, anything else through the scratch (16-bit
// data always).
static inline void attn_load_rows(thread simdgroup_float8x8& m, const device float* x, ulong ld, uint row0,
                                  uint nrows, uint ncols, threadgroup float* scr, uint lane) {
    if (row0 + 8 <= nrows && ncols >= 8) {
        simdgroup_load(m, x + ulong(row0) * ld, ld);
        return;
    }
    attn_load_rows_safe(m, x, ld, row0, nrows, ncols, scr, lane);
}
template <typename T>
static inline void attn_load_rows(thread simdgroup_float8x8& m, const device T* x, ulong ld, uint row0, uint nrows,
                                  uint ncols, threadgroup float* scr, uint lane) {
    attn_load_rows_safe(m, x, ld, row0, nrows, ncols, scr, lane);
}

// attn_store_rows_safe stores the rows of m below nrows and its columns
// below ncols to x (rows ld apart), each element rounded once to T,
// through the scratch.
template <typename T>
static inline void attn_store_rows_safe(thread simdgroup_float8x8& m, device T* x, ulong ld, uint row0, uint nrows,
                                        uint ncols, threadgroup float* scr, uint lane) {
    simdgroup_store(m, scr, 8);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    for (uint e = lane; e < 64; e += 32) {
        const uint r = row0 + e / 8;
        if (r < nrows && e % 8 < ncols) {
            x[ulong(r) * ld + e % 8] = forge_narrow<T>(scr[e]);
        }
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
}

// attn_store_rows stores as attn_store_rows_safe does: a whole float block
// straight to memory, anything else through the scratch.
static inline void attn_store_rows(thread simdgroup_float8x8& m, device float* x, ulong ld, uint row0, uint nrows,
                                   uint ncols, threadgroup float* scr, uint lane) {
    if (row0 + 8 <= nrows && ncols >= 8) {
        simdgroup_store(m, x + ulong(row0) * ld, ld);
        return;
    }
    attn_store_rows_safe(m, x, ld, row0, nrows, ncols, scr, lane);
}
template <typename T>
static inline void attn_store_rows(thread simdgroup_float8x8& m, device T* x, ulong ld, uint row0, uint nrows,
                                   uint ncols, threadgroup float* scr, uint lane) {
    attn_store_rows_safe(m, x, ld, row0, nrows, ncols, scr, lane);
}

// attn_stage copies rows row0 … row0+BK−1 of a (rows ld apart, ncols ≤ D
// wide) into the threadgroup tile t (rows LDT apart), widened to float,
// zero past nrows and ncols.
template <uint D, typename T>
static inline void attn_stage(threadgroup float* t, const device T* a, ulong ld, uint row0, uint nrows, uint ncols,
                              uint tid, uint nthr) {
    typedef AttnTile<D> G;
    for (uint e = tid; e < G::BK * D; e += nthr) {
        const uint r = e / D;
        const uint c = e % D;
        const uint g = row0 + r;
        t[r * G::LDT + c] = g < nrows && c < ncols ? forge_widen(a[ulong(g) * ld + c]) : 0.0f;
    }
}

// attn_dim is a call's head dim for the fast-path instance D reading q: D
// itself for float (the Go side runs the instance of the call's D), p.D
// (≤ D) for 16-bit data, whose instances serve every head dim up to D:
// fragments at columns ≥ p.D are never loaded, multiplied or stored, and
// the staged tiles are zero there.
template <uint D>
static inline uint attn_dim(const device float* q, constant AttnParams& p) {
    return D;
}
template <uint D, typename T>
static inline uint attn_dim(const device T* q, constant AttnParams& p) {
    return p.D;
}

// attn_pair_max / attn_pair_sum combine a value over the four lanes of a
// row (lanes 4r … 4r+3). Every lane gets the same bits: the pairs are
// combined symmetrically.
static inline float attn_row_max(float x, uint lane) {
    x = max(x, simd_shuffle(x, ushort(lane ^ 1)));
    return max(x, simd_shuffle(x, ushort(lane ^ 2)));
}
static inline float attn_row_sum(float x, uint lane) {
    x += simd_shuffle(x, ushort(lane ^ 1));
    return x + simd_shuffle(x, ushort(lane ^ 2));
}

template <uint D, typename T>
kernel void attention_fwd(device T* out [[buffer(0)]],
                          device float* lse [[buffer(1)]],
                          const device T* q [[buffer(2)]],
                          const device T* k [[buffer(3)]],
                          const device T* v [[buffer(4)]],
                          constant AttnParams& p [[buffer(5)]],
                          uint3 tg [[threadgroup_position_in_grid]],
                          uint tid [[thread_index_in_threadgroup]],
                          uint nthr [[threads_per_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]],
                          uint sg [[simdgroup_index_in_threadgroup]],
                          uint nsg [[simdgroups_per_threadgroup]]) {
    typedef AttnTile<D> A;
    threadgroup float ks[A::BK * A::LDT];
    threadgroup float vs[A::BK * A::LDT];
    threadgroup float scores[ATTN_SG * 8 * A::LDS];
    threadgroup float diags[ATTN_SG * 64];
    threadgroup float frags[ATTN_SG * 64];

    const uint b = tg.z;
    const uint h = tg.y;
    const uint kvh = h / p.G;
    const uint i0 = tg.x * nsg * 8;   // the threadgroup's first query row
    const uint r0 = i0 + sg * 8;      // this simdgroup's first query row
    const int tk = int(p.Tk);
    const int shift = tk - int(p.Tq); // query i sits at position shift + i
    const device T* qh = q + ulong(b) * p.q_sb + ulong(h) * p.q_sh;
    const device T* kh = k + ulong(b) * p.k_sb + ulong(kvh) * p.k_sh;
    const device T* vh = v + ulong(b) * p.v_sb + ulong(kvh) * p.v_sh;
    threadgroup float* ss = scores + sg * 8 * A::LDS;
    threadgroup float* dg = diags + sg * 64;
    threadgroup float* fr = frags + sg * 64;

    const uint row = lane / 4; // the row this lane updates, and its columns row·… + sub + 4t
    const uint sub = lane % 4;
    const int qi = int(r0 + row);
    const uint dd = attn_dim<D>(q, p); // the head dim: fragments f with 8·f < dd

    simdgroup_float8x8 qf[A::DF];
    simdgroup_float8x8 of[A::DF];
#pragma clang loop unroll(full)
    for (uint f = 0; f < A::DF; f++) {
        if (f * 8 < dd) { // within the call's head dim (always, for float data)
            attn_load_rows(qf[f], qh + f * 8, p.q_st, r0, p.Tq, dd - f * 8, fr, lane);
            of[f] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
    }
    for (uint e = lane; e < 64; e += 32) {
        dg[e] = 0.0f;
    }
    float m = ATTN_NEG; // the row's running max of the scaled scores
    float l = 0.0f;     // … and its running sum of exp(s − m)

    // Keys the threadgroup's last real row sees (causal), or all.
    const int last = int(min(i0 + nsg * 8, p.Tq));
    const int kend = attn_causal ? min(tk, shift + last) : tk;
    const bool active = r0 < p.Tq;
    // The simdgroup's rows see keys below sg_lim (its last row's limit) and
    // all keys below sg_full (its first row's limit).
    const int sg_lim = attn_causal ? min(tk, shift + int(r0) + 8) : tk;
    const int sg_full = attn_causal ? min(tk, shift + int(r0) + 1) : tk;

    for (int kb = 0; kb < kend; kb += int(A::BK)) {
        attn_stage<D>(ks, kh, p.k_st, uint(kb), p.Tk, dd, tid, nthr);
        attn_stage<D>(vs, vh, p.v_st, uint(kb), p.Tk, dd, tid, nthr);
        threadgroup_barrier(mem_flags::mem_threadgroup);

        if (active && kb < sg_lim) {
            // S = Q·Kᵀ (8 × BK) into the scratch.
#pragma clang loop unroll(full)
            for (uint j = 0; j < A::BF; j++) {
                simdgroup_float8x8 s = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
#pragma clang loop unroll(full)
                for (uint f = 0; f < A::DF; f++) {
                    if (f * 8 < dd) {
                        simdgroup_float8x8 kt;
                        simdgroup_load(kt, ks + j * 8 * A::LDT + f * 8, A::LDT, ulong2(0, 0), true);
                        simdgroup_multiply_accumulate(s, qf[f], kt, s);
                    }
                }
                simdgroup_store(s, ss + j * 8, A::LDS);
            }
            simdgroup_barrier(mem_flags::mem_threadgroup);

            // Online softmax: four lanes per row.
            const bool full = kb + int(A::BK) <= sg_full;
            threadgroup float* sr = ss + row * A::LDS;
            float x[A::BL];
            float bm = ATTN_NEG;
#pragma clang loop unroll(full)
            for (uint t = 0; t < A::BL; t++) {
                const uint c = sub + 4 * t;
                x[t] = sr[c] * p.scale;
                if (full || attn_visible(qi, kb + int(c), shift, tk)) {
                    bm = max(bm, x[t]);
                }
            }
            bm = attn_row_max(bm, lane);
            const float mn = max(m, bm);
            const float corr = exp2((m - mn) * M_LOG2E_F);
            float rs = 0.0f;
#pragma clang loop unroll(full)
            for (uint t = 0; t < A::BL; t++) {
                const uint c = sub + 4 * t;
                float e = 0.0f;
                if (full || attn_visible(qi, kb + int(c), shift, tk)) {
                    e = exp2((x[t] - mn) * M_LOG2E_F);
                }
                sr[c] = e;
                rs += e;
            }
            rs = attn_row_sum(rs, lane);
            l = l * corr + rs;
            m = mn;
            if (sub == 0) {
                dg[row * 9] = corr;
            }
            const bool rescale = simd_min(corr) < 1.0f; // corr ≤ 1
            simdgroup_barrier(mem_flags::mem_threadgroup);

            // O ← diag(corr)·O + P·V.
            if (rescale) {
                simdgroup_float8x8 dm;
                simdgroup_load(dm, dg, 8);
#pragma clang loop unroll(full)
                for (uint f = 0; f < A::DF; f++) {
                    if (f * 8 < dd) {
                        simdgroup_multiply(of[f], dm, of[f]);
                    }
                }
            }
#pragma clang loop unroll(full)
            for (uint j = 0; j < A::BF; j++) {
                simdgroup_float8x8 pf;
                simdgroup_load(pf, ss + j * 8, A::LDS);
#pragma clang loop unroll(full)
                for (uint f = 0; f < A::DF; f++) {
                    if (f * 8 < dd) {
                        simdgroup_float8x8 vf;
                        simdgroup_load(vf, vs + j * 8 * A::LDT + f * 8, A::LDT);
                        simdgroup_multiply_accumulate(of[f], pf, vf, of[f]);
                    }
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    // out = diag(1/l)·O; lse = m + log l (rows that saw nothing: 0, −FLT_MAX).
    simdgroup_barrier(mem_flags::mem_threadgroup);
    if (sub == 0) {
        dg[row * 9] = l > 0.0f ? 1.0f / l : 0.0f;
        if (active && uint(qi) < p.Tq) {
            lse[(ulong(b) * p.H + h) * p.Tq + uint(qi)] = l > 0.0f ? m + log(l) : -FLT_MAX;
        }
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    if (active) {
        simdgroup_float8x8 dm;
        simdgroup_load(dm, dg, 8);
        device T* oh = out + ulong(b) * p.o_sb + ulong(h) * p.o_sh;
#pragma clang loop unroll(full)
        for (uint f = 0; f < A::DF; f++) {
            if (f * 8 < dd) {
                simdgroup_multiply(of[f], dm, of[f]);
                attn_store_rows(of[f], oh + f * 8, p.o_st, r0, p.Tq, dd - f * 8, fr, lane);
            }
        }
    }
}

// delta[n] = Σ_d dout[n][d]·out[n][d] for every query row n = (b·H + h)·Tq
// + i; one simdgroup per row, rows numbered x-fastest over a 2-D grid.
// The sum is compensated (exact products by fma, error-free additions:
// about twice float32's precision, rounded once at the end): delta is
// subtracted from dP ≈ delta for the dominant keys of sharp rows, where a
// float32 sum's rounding error would be amplified into dq and dk. Lane
// partials meet in threadgroup memory; lane 0 adds them in lane order.
static inline void attn_two_sum(thread float& hi, thread float& lo, float x) {
    const float s = hi + x;
    const float bb = s - hi;
    lo += (hi - (s - bb)) + (x - bb);
    hi = s;
}

template <typename T>
kernel void attention_bwd_delta(device float* delta [[buffer(0)]],
                                const device T* out [[buffer(1)]],
                                const device T* dout [[buffer(2)]],
                                constant AttnParams& p [[buffer(3)]],
                                uint3 tgpos [[threadgroup_position_in_grid]],
                                uint3 ntg [[threadgroups_per_grid]],
                                uint lane [[thread_index_in_simdgroup]],
                                uint sg [[simdgroup_index_in_threadgroup]],
                                uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float parts[ATTN_DELTA_SG * 64];

    const ulong n = (ulong(tgpos.y) * ntg.x + tgpos.x) * nsg + sg;
    if (n >= ulong(p.B) * p.H * p.Tq) {
        return; // the whole simdgroup
    }
    const uint i = uint(n % p.Tq);
    const uint bh = uint(n / p.Tq);
    const uint h = bh % p.H;
    const uint b = bh / p.H;
    const device T* o = out + ulong(b) * p.o_sb + ulong(h) * p.o_sh + ulong(i) * p.o_st;
    const device T* g = dout + ulong(b) * p.g_sb + ulong(h) * p.g_sh + ulong(i) * p.g_st;
    float hi = 0.0f;
    float lo = 0.0f;
    for (uint d = lane; d < p.D; d += 32) {
        const float od = forge_widen(o[d]);
        const float gd = forge_widen(g[d]);
        const float x = od * gd;
        lo += fma(od, gd, -x); // the product's rounding error, exactly
        attn_two_sum(hi, lo, x);
    }
    threadgroup float* pr = parts + sg * 64;
    pr[2 * lane] = hi;
    pr[2 * lane + 1] = lo;
    simdgroup_barrier(mem_flags::mem_threadgroup);
    if (lane == 0) {
        float s = 0.0f;
        float c = 0.0f;
        for (uint l = 0; l < 32; l++) {
            attn_two_sum(s, c, pr[2 * l]);
            c += pr[2 * l + 1];
        }
        delta[n] = s + c;
    }
}

template <uint D, typename T>
kernel void attention_bwd_dq(device T* dq [[buffer(0)]],
                             const device T* q [[buffer(1)]],
                             const device T* k [[buffer(2)]],
                             const device T* v [[buffer(3)]],
                             const device T* dout [[buffer(4)]],
                             const device float* lse [[buffer(5)]],
                             const device float* delta [[buffer(6)]],
                             constant AttnParams& p [[buffer(7)]],
                             uint3 tg [[threadgroup_position_in_grid]],
                             uint tid [[thread_index_in_threadgroup]],
                             uint nthr [[threads_per_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]],
                             uint sg [[simdgroup_index_in_threadgroup]],
                             uint nsg [[simdgroups_per_threadgroup]]) {
    typedef AttnTile<D> A;
    threadgroup float ks[A::BK * A::LDT];
    threadgroup float vs[A::BK * A::LDT];
    threadgroup float scores[ATTN_SG * 8 * A::LDS];
    threadgroup float dscores[ATTN_SG * 8 * A::LDS];
    threadgroup float frags[ATTN_SG * 64];

    const uint b = tg.z;
    const uint h = tg.y;
    const uint kvh = h / p.G;
    const uint i0 = tg.x * nsg * 8;
    const uint r0 = i0 + sg * 8;
    const int tk = int(p.Tk);
    const int shift = tk - int(p.Tq);
    const ulong bh = ulong(b) * p.H + h;
    const device T* qh = q + ulong(b) * p.q_sb + ulong(h) * p.q_sh;
    const device T* gh = dout + ulong(b) * p.g_sb + ulong(h) * p.g_sh;
    const device T* kh = k + ulong(b) * p.k_sb + ulong(kvh) * p.k_sh;
    const device T* vh = v + ulong(b) * p.v_sb + ulong(kvh) * p.v_sh;
    threadgroup float* ss = scores + sg * 8 * A::LDS;
    threadgroup float* ds = dscores + sg * 8 * A::LDS;
    threadgroup float* fr = frags + sg * 64;

    const uint row = lane / 4;
    const uint sub = lane % 4;
    const int qi = int(r0 + row);
    const uint dd = attn_dim<D>(q, p);
    const bool real = uint(qi) < p.Tq;
    const float lrow = real ? lse[bh * p.Tq + uint(qi)] : 0.0f;
    const float drow = real ? delta[bh * p.Tq + uint(qi)] : 0.0f;

    simdgroup_float8x8 qf[A::DF];
    simdgroup_float8x8 gf[A::DF];
    simdgroup_float8x8 acc[A::DF];
#pragma clang loop unroll(full)
    for (uint f = 0; f < A::DF; f++) {
        if (f * 8 < dd) {
            attn_load_rows(qf[f], qh + f * 8, p.q_st, r0, p.Tq, dd - f * 8, fr, lane);
            attn_load_rows(gf[f], gh + f * 8, p.g_st, r0, p.Tq, dd - f * 8, fr, lane);
            acc[f] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
    }

    const int last = int(min(i0 + nsg * 8, p.Tq));
    const int kend = attn_causal ? min(tk, shift + last) : tk;
    const bool active = r0 < p.Tq;
    const int sg_lim = attn_causal ? min(tk, shift + int(r0) + 8) : tk;
    const int sg_full = attn_causal ? min(tk, shift + int(r0) + 1) : tk;

    for (int kb = 0; kb < kend; kb += int(A::BK)) {
        attn_stage<D>(ks, kh, p.k_st, uint(kb), p.Tk, dd, tid, nthr);
        attn_stage<D>(vs, vh, p.v_st, uint(kb), p.Tk, dd, tid, nthr);
        threadgroup_barrier(mem_flags::mem_threadgroup);

        if (active && kb < sg_lim) {
            // S = Q·Kᵀ and dP = dO·Vᵀ (8 × BK each) into the scratches.
#pragma clang loop unroll(full)
            for (uint j = 0; j < A::BF; j++) {
                simdgroup_float8x8 s = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
                simdgroup_float8x8 dp = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
#pragma clang loop unroll(full)
                for (uint f = 0; f < A::DF; f++) {
                    if (f * 8 < dd) {
                        simdgroup_float8x8 kt;
                        simdgroup_float8x8 vt;
                        simdgroup_load(kt, ks + j * 8 * A::LDT + f * 8, A::LDT, ulong2(0, 0), true);
                        simdgroup_load(vt, vs + j * 8 * A::LDT + f * 8, A::LDT, ulong2(0, 0), true);
                        simdgroup_multiply_accumulate(s, qf[f], kt, s);
                        simdgroup_multiply_accumulate(dp, gf[f], vt, dp);
                    }
                }
                simdgroup_store(s, ss + j * 8, A::LDS);
                simdgroup_store(dp, ds + j * 8, A::LDS);
            }
            simdgroup_barrier(mem_flags::mem_threadgroup);

            // dS = P ∘ (dP − delta), P = exp(s·scale − lse); 0 where masked.
            const bool full = kb + int(A::BK) <= sg_full;
            threadgroup float* sr = ss + row * A::LDS;
            threadgroup float* dr = ds + row * A::LDS;
#pragma clang loop unroll(full)
            for (uint t = 0; t < A::BL; t++) {
                const uint c = sub + 4 * t;
                float g = 0.0f;
                if (full || attn_visible(qi, kb + int(c), shift, tk)) {
                    const float pr = exp2((sr[c] * p.scale - lrow) * M_LOG2E_F);
                    g = pr * (dr[c] - drow);
                }
                dr[c] = g;
            }
            simdgroup_barrier(mem_flags::mem_threadgroup);

            // dQ += dS·K.
#pragma clang loop unroll(full)
            for (uint j = 0; j < A::BF; j++) {
                simdgroup_float8x8 sf;
                simdgroup_load(sf, ds + j * 8, A::LDS);
#pragma clang loop unroll(full)
                for (uint f = 0; f < A::DF; f++) {
                    if (f * 8 < dd) {
                        simdgroup_float8x8 kf;
                        simdgroup_load(kf, ks + j * 8 * A::LDT + f * 8, A::LDT);
                        simdgroup_multiply_accumulate(acc[f], sf, kf, acc[f]);
                    }
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    if (active) {
        const simdgroup_float8x8 sc(p.scale);
        device T* dqh = dq + bh * p.Tq * dd;
#pragma clang loop unroll(full)
        for (uint f = 0; f < A::DF; f++) {
            if (f * 8 < dd) {
                simdgroup_multiply(acc[f], sc, acc[f]);
                attn_store_rows(acc[f], dqh + f * 8, dd, r0, p.Tq, dd - f * 8, fr, lane);
            }
        }
    }
}

// attention_bwd_kv<D, T, DK> is the dk kernel (DK) or the dv kernel (!DK)
// of the fast path; both bind the dq kernel's buffers, with dx = dk or dv
// in place of dq (the dv kernel reads neither v nor delta). Each keeps one
// accumulator in registers: the dv kernel K and dV (2·D/8 fragments), the
// dk kernel K, V and dK (3·D/8); a single kernel holding K, V, dK and dV
// spills. The dk kernel recomputes Sᵀ = K·Qᵀ, which the dv kernel also
// computes: the same operations in the same order, so each output has the
// bits a fused kernel would give it.
template <uint D, typename T, bool DK>
kernel void attention_bwd_kv(device T* dx [[buffer(0)]],
                             const device T* q [[buffer(1)]],
                             const device T* k [[buffer(2)]],
                             const device T* v [[buffer(3)]],
                             const device T* dout [[buffer(4)]],
                             const device float* lse [[buffer(5)]],
                             const device float* delta [[buffer(6)]],
                             constant AttnParams& p [[buffer(7)]],
                             uint3 tg [[threadgroup_position_in_grid]],
                             uint tid [[thread_index_in_threadgroup]],
                             uint nthr [[threads_per_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]],
                             uint sg [[simdgroup_index_in_threadgroup]],
                             uint nsg [[simdgroups_per_threadgroup]]) {
    typedef AttnTile<D> A;
    threadgroup float qs[A::BK * A::LDT];
    threadgroup float gs[A::BK * A::LDT];
    threadgroup float lses[A::BK];
    threadgroup float deltas[DK ? A::BK : 1];
    threadgroup float scores[ATTN_SG * 8 * A::LDS];
    threadgroup float dscores[DK ? ATTN_SG * 8 * A::LDS : 1];
    threadgroup float frags[ATTN_SG * 64];

    const uint b = tg.z;
    const uint kvh = tg.y;
    const uint j0 = tg.x * nsg * 8;  // the threadgroup's first key row
    const uint c0 = j0 + sg * 8;     // this simdgroup's first key row
    const int tq = int(p.Tq);
    const int tk = int(p.Tk);
    const int shift = tk - tq;
    const device T* kh = k + ulong(b) * p.k_sb + ulong(kvh) * p.k_sh;
    const device T* vh = v + ulong(b) * p.v_sb + ulong(kvh) * p.v_sh;
    threadgroup float* ss = scores + sg * 8 * A::LDS;
    threadgroup float* ds = dscores + (DK ? sg * 8 * A::LDS : 0);
    threadgroup float* fr = frags + sg * 64;

    const uint row = lane / 4; // key row c0 + row; columns are query rows
    const uint sub = lane % 4;
    const int kj = int(c0 + row);
    const uint dd = attn_dim<D>(q, p);

    simdgroup_float8x8 kf[A::DF];
    simdgroup_float8x8 vf[A::DF]; // dk only
    simdgroup_float8x8 acc[A::DF]; // dK (DK) or dV
#pragma clang loop unroll(full)
    for (uint f = 0; f < A::DF; f++) {
        if (f * 8 < dd) {
            attn_load_rows(kf[f], kh + f * 8, p.k_st, c0, p.Tk, dd - f * 8, fr, lane);
            if (DK) {
                attn_load_rows(vf[f], vh + f * 8, p.v_st, c0, p.Tk, dd - f * 8, fr, lane);
            }
            acc[f] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
    }

    const bool active = c0 < p.Tk;
    // Causal: query i sees key j iff i ≥ j − shift. Queries before the
    // threadgroup's first key's row see none of its keys; the simdgroup's
    // keys are all seen by queries from c0 + 7 − shift on.
    int qstart = attn_causal ? max(0, int(j0) - shift) : 0;
    qstart -= qstart % int(A::BK);
    const int sg_first = attn_causal ? int(c0) - shift : 0;     // first query that sees key c0
    const int sg_all = attn_causal ? int(c0) + 7 - shift : 0;   // first query that sees all 8 keys
    const bool keys_in = c0 + 8 <= p.Tk;

    for (uint hh = 0; hh < p.G; hh++) {
        const uint h = kvh * p.G + hh;
        const ulong bh = ulong(b) * p.H + h;
        const device T* qh = q + ulong(b) * p.q_sb + ulong(h) * p.q_sh;
        const device T* gh = dout + ulong(b) * p.g_sb + ulong(h) * p.g_sh;
        for (int ib = qstart; ib < tq; ib += int(A::BK)) {
            attn_stage<D>(qs, qh, p.q_st, uint(ib), p.Tq, dd, tid, nthr);
            attn_stage<D>(gs, gh, p.g_st, uint(ib), p.Tq, dd, tid, nthr);
            for (uint e = tid; e < A::BK; e += nthr) {
                const int i = ib + int(e);
                lses[e] = i < tq ? lse[bh * p.Tq + uint(i)] : 0.0f;
                if (DK) {
                    deltas[e] = i < tq ? delta[bh * p.Tq + uint(i)] : 0.0f;
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);

            if (active && ib + int(A::BK) > sg_first) {
                // Sᵀ = K·Qᵀ and (dk) dPᵀ = V·dOᵀ (8 keys × BK queries).
#pragma clang loop unroll(full)
                for (uint t = 0; t < A::BF; t++) {
                    simdgroup_float8x8 s = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
                    simdgroup_float8x8 dp = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
#pragma clang loop unroll(full)
                    for (uint f = 0; f < A::DF; f++) {
                        if (f * 8 < dd) {
                            simdgroup_float8x8 qt;
                            simdgroup_load(qt, qs + t * 8 * A::LDT + f * 8, A::LDT, ulong2(0, 0), true);
                            simdgroup_multiply_accumulate(s, kf[f], qt, s);
                            if (DK) {
                                simdgroup_float8x8 gt;
                                simdgroup_load(gt, gs + t * 8 * A::LDT + f * 8, A::LDT, ulong2(0, 0), true);
                                simdgroup_multiply_accumulate(dp, vf[f], gt, dp);
                            }
                        }
                    }
                    simdgroup_store(s, ss + t * 8, A::LDS);
                    if (DK) {
                        simdgroup_store(dp, ds + t * 8, A::LDS);
                    }
                }
                simdgroup_barrier(mem_flags::mem_threadgroup);

                // Pᵀ, and (dk) dSᵀ = Pᵀ ∘ (dPᵀ − delta) in its place; 0
                // where masked.
                const bool full = keys_in && ib + int(A::BK) <= tq && ib >= sg_all;
                threadgroup float* sr = ss + row * A::LDS;
                threadgroup float* dr = ds + (DK ? row * A::LDS : 0);
#pragma clang loop unroll(full)
                for (uint t = 0; t < A::BL; t++) {
                    const uint c = sub + 4 * t;
                    const int i = ib + int(c);
                    float pr = 0.0f;
                    float g = 0.0f;
                    if (full || (i < tq && attn_visible(i, kj, shift, tk))) {
                        pr = exp2((sr[c] * p.scale - lses[c]) * M_LOG2E_F);
                        if (DK) {
                            g = pr * (dr[c] - deltas[c]);
                        }
                    }
                    if (DK) {
                        dr[c] = g;
                    } else {
                        sr[c] = pr;
                    }
                }
                simdgroup_barrier(mem_flags::mem_threadgroup);

                // dK += dSᵀ·Q, or dV += Pᵀ·dO.
                threadgroup float* lhs = DK ? ds : ss;
                threadgroup float* rhs = DK ? qs : gs;
#pragma clang loop unroll(full)
                for (uint t = 0; t < A::BF; t++) {
                    simdgroup_float8x8 lf;
                    simdgroup_load(lf, lhs + t * 8, A::LDS);
#pragma clang loop unroll(full)
                    for (uint f = 0; f < A::DF; f++) {
                        if (f * 8 < dd) {
                            simdgroup_float8x8 rf;
                            simdgroup_load(rf, rhs + t * 8 * A::LDT + f * 8, A::LDT);
                            simdgroup_multiply_accumulate(acc[f], lf, rf, acc[f]);
                        }
                    }
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
    }

    if (active) {
        const simdgroup_float8x8 sc(p.scale);
        const ulong base = (ulong(b) * p.Hkv + kvh) * p.Tk * dd;
#pragma clang loop unroll(full)
        for (uint f = 0; f < A::DF; f++) {
            if (f * 8 < dd) {
                if (DK) {
                    simdgroup_multiply(acc[f], sc, acc[f]);
                }
                attn_store_rows(acc[f], dx + base + f * 8, dd, c0, p.Tk, dd - f * 8, fr, lane);
            }
        }
    }
}

// ---- reference path: one thread per row, any D ------------------------------
//
// The float32 kernels accumulate straight into their output rows. The
// 16-bit ones (attention_naive_<part>_f16 / _bf16) take a float32 scratch
// buffer after the parameter block with one row of D floats per output row
// (out and dq: row n at n·D; dk: row n at n·D and dv: row n at
// (B·Hkv·Tk + n)·D), accumulate there in the same order, and round each
// element once into the output row at the end.

// attn_dot returns Σ_d a[d]·b[d] over n elements.
template <typename T>
static inline float attn_dot(const device T* a, const device T* b, uint n) {
    float s = 0.0f;
    for (uint d = 0; d < n; d++) {
        s = fma(forge_widen(a[d]), forge_widen(b[d]), s);
    }
    return s;
}

// attn_acc_row is the float row a reference thread accumulates output row o
// (D floats, its row n) in: o itself for a float output, else row n of the
// scratch.
static inline device float* attn_acc_row(device float* o, device float* scratch, ulong n, uint d) {
    return o;
}
template <typename T>
static inline device float* attn_acc_row(device T* o, device float* scratch, ulong n, uint d) {
    return scratch + n * d;
}

// attn_acc_out rounds the accumulated row a (n floats) into the output row o
// (nothing to do for a float output: a is o).
static inline void attn_acc_out(device float* o, const device float* a, uint n) {}
template <typename T>
static inline void attn_acc_out(device T* o, const device float* a, uint n) {
    for (uint d = 0; d < n; d++) {
        o[d] = forge_narrow<T>(a[d]);
    }
}

// attn_row_index is the row a reference thread handles (rows numbered
// x-fastest over a 2-D grid of threadgroups).
static inline ulong attn_row_index(uint3 tgpos, uint3 ntg, uint tid, uint tsize) {
    return (ulong(tgpos.y) * ntg.x + tgpos.x) * tsize + tid;
}

// attn_naive_fwd_row computes query row n = (b·H + h)·Tq + i.
template <typename T>
static inline void attn_naive_fwd_row(ulong n, device T* out, device float* lse, const device T* q, const device T* k,
                                      const device T* v, constant AttnParams& p, device float* scratch) {
    const uint i = uint(n % p.Tq);
    const uint bh = uint(n / p.Tq);
    const uint h = bh % p.H;
    const uint b = bh / p.H;
    const uint kvh = h / p.G;
    const device T* qr = q + ulong(b) * p.q_sb + ulong(h) * p.q_sh + ulong(i) * p.q_st;
    const device T* kh = k + ulong(b) * p.k_sb + ulong(kvh) * p.k_sh;
    const device T* vh = v + ulong(b) * p.v_sb + ulong(kvh) * p.v_sh;
    device T* orow = out + ulong(b) * p.o_sb + ulong(h) * p.o_sh + ulong(i) * p.o_st;
    device float* acc = attn_acc_row(orow, scratch, n, p.D);
    const int lim = attn_causal ? min(int(p.Tk), int(p.Tk) - int(p.Tq) + int(i) + 1) : int(p.Tk);
    const uint nk = uint(max(lim, 0));

    float m = ATTN_NEG;
    float l = 0.0f;
    for (uint j = 0; j < nk; j++) {
        const float s = attn_dot(qr, kh + ulong(j) * p.k_st, p.D) * p.scale;
        const float mn = max(m, s);
        l = l * exp(m - mn) + exp(s - mn);
        m = mn;
    }
    for (uint d = 0; d < p.D; d++) {
        acc[d] = 0.0f;
    }
    if (nk == 0) {
        attn_acc_out(orow, acc, p.D);
        lse[n] = -FLT_MAX;
        return;
    }
    const float inv = 1.0f / l;
    for (uint j = 0; j < nk; j++) {
        const float s = attn_dot(qr, kh + ulong(j) * p.k_st, p.D) * p.scale;
        const float pr = exp(s - m) * inv;
        const device T* vr = vh + ulong(j) * p.v_st;
        for (uint d = 0; d < p.D; d++) {
            acc[d] = fma(pr, forge_widen(vr[d]), acc[d]);
        }
    }
    attn_acc_out(orow, acc, p.D);
    lse[n] = m + log(l);
}

// attn_naive_dq_row computes dq's row n = (b·H + h)·Tq + i.
template <typename T>
static inline void attn_naive_dq_row(ulong n, device T* dq, const device T* q, const device T* k, const device T* v,
                                     const device T* dout, const device float* lse, const device float* delta,
                                     constant AttnParams& p, device float* scratch) {
    const uint i = uint(n % p.Tq);
    const uint bh = uint(n / p.Tq);
    const uint h = bh % p.H;
    const uint b = bh / p.H;
    const uint kvh = h / p.G;
    const device T* qr = q + ulong(b) * p.q_sb + ulong(h) * p.q_sh + ulong(i) * p.q_st;
    const device T* gr = dout + ulong(b) * p.g_sb + ulong(h) * p.g_sh + ulong(i) * p.g_st;
    const device T* kh = k + ulong(b) * p.k_sb + ulong(kvh) * p.k_sh;
    const device T* vh = v + ulong(b) * p.v_sb + ulong(kvh) * p.v_sh;
    device T* dqr = dq + n * p.D;
    device float* dr = attn_acc_row(dqr, scratch, n, p.D);
    const int lim = attn_causal ? min(int(p.Tk), int(p.Tk) - int(p.Tq) + int(i) + 1) : int(p.Tk);
    const uint nk = uint(max(lim, 0));
    const float lr = lse[n];
    const float dl = delta[n];

    for (uint d = 0; d < p.D; d++) {
        dr[d] = 0.0f;
    }
    for (uint j = 0; j < nk; j++) {
        const device T* kr = kh + ulong(j) * p.k_st;
        const float pr = exp(attn_dot(qr, kr, p.D) * p.scale - lr);
        const float g = pr * (attn_dot(gr, vh + ulong(j) * p.v_st, p.D) - dl);
        for (uint d = 0; d < p.D; d++) {
            dr[d] = fma(g, forge_widen(kr[d]), dr[d]);
        }
    }
    for (uint d = 0; d < p.D; d++) {
        dr[d] *= p.scale;
    }
    attn_acc_out(dqr, dr, p.D);
}

// attn_naive_dkv_row computes the rows n = (b·Hkv + kvh)·Tk + j of dk and dv.
template <typename T>
static inline void attn_naive_dkv_row(ulong n, device T* dk, device T* dv, const device T* q, const device T* k,
                                      const device T* v, const device T* dout, const device float* lse,
                                      const device float* delta, constant AttnParams& p, device float* scratch) {
    const uint j = uint(n % p.Tk);
    const uint bk = uint(n / p.Tk);
    const uint kvh = bk % p.Hkv;
    const uint b = bk / p.Hkv;
    const device T* kr = k + ulong(b) * p.k_sb + ulong(kvh) * p.k_sh + ulong(j) * p.k_st;
    const device T* vr = v + ulong(b) * p.v_sb + ulong(kvh) * p.v_sh + ulong(j) * p.v_st;
    device T* dko = dk + n * p.D;
    device T* dvo = dv + n * p.D;
    device float* dkr = attn_acc_row(dko, scratch, n, p.D);
    device float* dvr = attn_acc_row(dvo, scratch + ulong(p.B) * p.Hkv * p.Tk * p.D, n, p.D);
    // Causal: query i sees key j iff i ≥ j − (Tk − Tq).
    const uint first = attn_causal ? uint(max(int(j) - (int(p.Tk) - int(p.Tq)), 0)) : 0u;

    for (uint d = 0; d < p.D; d++) {
        dkr[d] = 0.0f;
        dvr[d] = 0.0f;
    }
    for (uint hh = 0; hh < p.G; hh++) {
        const uint h = kvh * p.G + hh;
        const ulong bh = ulong(b) * p.H + h;
        const device T* qh = q + ulong(b) * p.q_sb + ulong(h) * p.q_sh;
        const device T* gh = dout + ulong(b) * p.g_sb + ulong(h) * p.g_sh;
        for (uint i = first; i < p.Tq; i++) {
            const device T* qr = qh + ulong(i) * p.q_st;
            const device T* gr = gh + ulong(i) * p.g_st;
            const float pr = exp(attn_dot(qr, kr, p.D) * p.scale - lse[bh * p.Tq + i]);
            const float g = pr * (attn_dot(gr, vr, p.D) - delta[bh * p.Tq + i]);
            for (uint d = 0; d < p.D; d++) {
                dvr[d] = fma(pr, forge_widen(gr[d]), dvr[d]);
                dkr[d] = fma(g, forge_widen(qr[d]), dkr[d]);
            }
        }
    }
    for (uint d = 0; d < p.D; d++) {
        dkr[d] *= p.scale;
    }
    attn_acc_out(dko, dkr, p.D);
    attn_acc_out(dvo, dvr, p.D);
}

kernel void attention_naive_fwd_f32(device float* out [[buffer(0)]],
                                    device float* lse [[buffer(1)]],
                                    const device float* q [[buffer(2)]],
                                    const device float* k [[buffer(3)]],
                                    const device float* v [[buffer(4)]],
                                    constant AttnParams& p [[buffer(5)]],
                                    uint3 tgpos [[threadgroup_position_in_grid]],
                                    uint3 ntg [[threadgroups_per_grid]],
                                    uint tid [[thread_index_in_threadgroup]],
                                    uint tsize [[threads_per_threadgroup]]) {
    const ulong n = attn_row_index(tgpos, ntg, tid, tsize);
    if (n < ulong(p.B) * p.H * p.Tq) {
        attn_naive_fwd_row(n, out, lse, q, k, v, p, out);
    }
}

kernel void attention_naive_dq_f32(device float* dq [[buffer(0)]],
                                   const device float* q [[buffer(1)]],
                                   const device float* k [[buffer(2)]],
                                   const device float* v [[buffer(3)]],
                                   const device float* dout [[buffer(4)]],
                                   const device float* lse [[buffer(5)]],
                                   const device float* delta [[buffer(6)]],
                                   constant AttnParams& p [[buffer(7)]],
                                   uint3 tgpos [[threadgroup_position_in_grid]],
                                   uint3 ntg [[threadgroups_per_grid]],
                                   uint tid [[thread_index_in_threadgroup]],
                                   uint tsize [[threads_per_threadgroup]]) {
    const ulong n = attn_row_index(tgpos, ntg, tid, tsize);
    if (n < ulong(p.B) * p.H * p.Tq) {
        attn_naive_dq_row(n, dq, q, k, v, dout, lse, delta, p, dq);
    }
}

kernel void attention_naive_dkv_f32(device float* dk [[buffer(0)]],
                                    device float* dv [[buffer(1)]],
                                    const device float* q [[buffer(2)]],
                                    const device float* k [[buffer(3)]],
                                    const device float* v [[buffer(4)]],
                                    const device float* dout [[buffer(5)]],
                                    const device float* lse [[buffer(6)]],
                                    const device float* delta [[buffer(7)]],
                                    constant AttnParams& p [[buffer(8)]],
                                    uint3 tgpos [[threadgroup_position_in_grid]],
                                    uint3 ntg [[threadgroups_per_grid]],
                                    uint tid [[thread_index_in_threadgroup]],
                                    uint tsize [[threads_per_threadgroup]]) {
    const ulong n = attn_row_index(tgpos, ntg, tid, tsize);
    if (n < ulong(p.B) * p.Hkv * p.Tk) {
        attn_naive_dkv_row(n, dk, dv, q, k, v, dout, lse, delta, p, dk);
    }
}

// The 16-bit reference kernels: as above, with the float32 scratch.
template <typename T>
kernel void attention_naive_fwd(device T* out [[buffer(0)]],
                                device float* lse [[buffer(1)]],
                                const device T* q [[buffer(2)]],
                                const device T* k [[buffer(3)]],
                                const device T* v [[buffer(4)]],
                                constant AttnParams& p [[buffer(5)]],
                                device float* scratch [[buffer(6)]],
                                uint3 tgpos [[threadgroup_position_in_grid]],
                                uint3 ntg [[threadgroups_per_grid]],
                                uint tid [[thread_index_in_threadgroup]],
                                uint tsize [[threads_per_threadgroup]]) {
    const ulong n = attn_row_index(tgpos, ntg, tid, tsize);
    if (n < ulong(p.B) * p.H * p.Tq) {
        attn_naive_fwd_row(n, out, lse, q, k, v, p, scratch);
    }
}

template <typename T>
kernel void attention_naive_dq(device T* dq [[buffer(0)]],
                               const device T* q [[buffer(1)]],
                               const device T* k [[buffer(2)]],
                               const device T* v [[buffer(3)]],
                               const device T* dout [[buffer(4)]],
                               const device float* lse [[buffer(5)]],
                               const device float* delta [[buffer(6)]],
                               constant AttnParams& p [[buffer(7)]],
                               device float* scratch [[buffer(8)]],
                               uint3 tgpos [[threadgroup_position_in_grid]],
                               uint3 ntg [[threadgroups_per_grid]],
                               uint tid [[thread_index_in_threadgroup]],
                               uint tsize [[threads_per_threadgroup]]) {
    const ulong n = attn_row_index(tgpos, ntg, tid, tsize);
    if (n < ulong(p.B) * p.H * p.Tq) {
        attn_naive_dq_row(n, dq, q, k, v, dout, lse, delta, p, scratch);
    }
}

template <typename T>
kernel void attention_naive_dkv(device T* dk [[buffer(0)]],
                                device T* dv [[buffer(1)]],
                                const device T* q [[buffer(2)]],
                                const device T* k [[buffer(3)]],
                                const device T* v [[buffer(4)]],
                                const device T* dout [[buffer(5)]],
                                const device float* lse [[buffer(6)]],
                                const device float* delta [[buffer(7)]],
                                constant AttnParams& p [[buffer(8)]],
                                device float* scratch [[buffer(9)]],
                                uint3 tgpos [[threadgroup_position_in_grid]],
                                uint3 ntg [[threadgroups_per_grid]],
                                uint tid [[thread_index_in_threadgroup]],
                                uint tsize [[threads_per_threadgroup]]) {
    const ulong n = attn_row_index(tgpos, ntg, tid, tsize);
    if (n < ulong(p.B) * p.Hkv * p.Tk) {
        attn_naive_dkv_row(n, dk, dv, q, k, v, dout, lse, delta, p, scratch);
    }
}

// ---- instantiations ------------------------------------------------------------

// The delta preprocess and the 16-bit reference kernels, per dtype.
template [[host_name("attention_bwd_delta_f32")]] [[kernel]] void attention_bwd_delta<float>(device float*, const device float*, const device float*, constant AttnParams&, uint3, uint3, uint, uint, uint);
template [[host_name("attention_bwd_delta_f16")]] [[kernel]] void attention_bwd_delta<half>(device float*, const device half*, const device half*, constant AttnParams&, uint3, uint3, uint, uint, uint);
template [[host_name("attention_bwd_delta_bf16")]] [[kernel]] void attention_bwd_delta<bfloat>(device float*, const device bfloat*, const device bfloat*, constant AttnParams&, uint3, uint3, uint, uint, uint);
template [[host_name("attention_naive_fwd_f16")]] [[kernel]] void attention_naive_fwd<half>(device half*, device float*, const device half*, const device half*, const device half*, constant AttnParams&, device float*, uint3, uint3, uint, uint);
template [[host_name("attention_naive_dq_f16")]] [[kernel]] void attention_naive_dq<half>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, device float*, uint3, uint3, uint, uint);
template [[host_name("attention_naive_dkv_f16")]] [[kernel]] void attention_naive_dkv<half>(device half*, device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, device float*, uint3, uint3, uint, uint);
template [[host_name("attention_naive_fwd_bf16")]] [[kernel]] void attention_naive_fwd<bfloat>(device bfloat*, device float*, const device bfloat*, const device bfloat*, const device bfloat*, constant AttnParams&, device float*, uint3, uint3, uint, uint);
template [[host_name("attention_naive_dq_bf16")]] [[kernel]] void attention_naive_dq<bfloat>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, device float*, uint3, uint3, uint, uint);
template [[host_name("attention_naive_dkv_bf16")]] [[kernel]] void attention_naive_dkv<bfloat>(device bfloat*, device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, device float*, uint3, uint3, uint, uint);

// The fast path: float32 at every head dim D = 8, 16, …, 128; 16-bit data
// at D = 32, 64, 96, 128 (each instance serves the head dims from the
// previous one's + 8 up to its own: see attn_dim).
template [[host_name("attention_fwd_d8_f32")]] [[kernel]] void attention_fwd<8, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d16_f32")]] [[kernel]] void attention_fwd<16, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d24_f32")]] [[kernel]] void attention_fwd<24, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d32_f32")]] [[kernel]] void attention_fwd<32, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d40_f32")]] [[kernel]] void attention_fwd<40, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d48_f32")]] [[kernel]] void attention_fwd<48, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d56_f32")]] [[kernel]] void attention_fwd<56, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d64_f32")]] [[kernel]] void attention_fwd<64, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d72_f32")]] [[kernel]] void attention_fwd<72, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d80_f32")]] [[kernel]] void attention_fwd<80, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d88_f32")]] [[kernel]] void attention_fwd<88, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d96_f32")]] [[kernel]] void attention_fwd<96, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d104_f32")]] [[kernel]] void attention_fwd<104, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d112_f32")]] [[kernel]] void attention_fwd<112, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d120_f32")]] [[kernel]] void attention_fwd<120, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d128_f32")]] [[kernel]] void attention_fwd<128, float>(device float*, device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);

template [[host_name("attention_fwd_d32_f16")]] [[kernel]] void attention_fwd<32, half>(device half*, device float*, const device half*, const device half*, const device half*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d64_f16")]] [[kernel]] void attention_fwd<64, half>(device half*, device float*, const device half*, const device half*, const device half*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d96_f16")]] [[kernel]] void attention_fwd<96, half>(device half*, device float*, const device half*, const device half*, const device half*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d128_f16")]] [[kernel]] void attention_fwd<128, half>(device half*, device float*, const device half*, const device half*, const device half*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);

template [[host_name("attention_fwd_d32_bf16")]] [[kernel]] void attention_fwd<32, bfloat>(device bfloat*, device float*, const device bfloat*, const device bfloat*, const device bfloat*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d64_bf16")]] [[kernel]] void attention_fwd<64, bfloat>(device bfloat*, device float*, const device bfloat*, const device bfloat*, const device bfloat*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d96_bf16")]] [[kernel]] void attention_fwd<96, bfloat>(device bfloat*, device float*, const device bfloat*, const device bfloat*, const device bfloat*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_fwd_d128_bf16")]] [[kernel]] void attention_fwd<128, bfloat>(device bfloat*, device float*, const device bfloat*, const device bfloat*, const device bfloat*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);

template [[host_name("attention_bwd_dq_d8_f32")]] [[kernel]] void attention_bwd_dq<8, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d16_f32")]] [[kernel]] void attention_bwd_dq<16, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d24_f32")]] [[kernel]] void attention_bwd_dq<24, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d32_f32")]] [[kernel]] void attention_bwd_dq<32, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d40_f32")]] [[kernel]] void attention_bwd_dq<40, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d48_f32")]] [[kernel]] void attention_bwd_dq<48, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d56_f32")]] [[kernel]] void attention_bwd_dq<56, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d64_f32")]] [[kernel]] void attention_bwd_dq<64, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d72_f32")]] [[kernel]] void attention_bwd_dq<72, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d80_f32")]] [[kernel]] void attention_bwd_dq<80, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d88_f32")]] [[kernel]] void attention_bwd_dq<88, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d96_f32")]] [[kernel]] void attention_bwd_dq<96, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d104_f32")]] [[kernel]] void attention_bwd_dq<104, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d112_f32")]] [[kernel]] void attention_bwd_dq<112, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d120_f32")]] [[kernel]] void attention_bwd_dq<120, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d128_f32")]] [[kernel]] void attention_bwd_dq<128, float>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);

template [[host_name("attention_bwd_dq_d32_f16")]] [[kernel]] void attention_bwd_dq<32, half>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d64_f16")]] [[kernel]] void attention_bwd_dq<64, half>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d96_f16")]] [[kernel]] void attention_bwd_dq<96, half>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d128_f16")]] [[kernel]] void attention_bwd_dq<128, half>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);

template [[host_name("attention_bwd_dq_d32_bf16")]] [[kernel]] void attention_bwd_dq<32, bfloat>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d64_bf16")]] [[kernel]] void attention_bwd_dq<64, bfloat>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d96_bf16")]] [[kernel]] void attention_bwd_dq<96, bfloat>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dq_d128_bf16")]] [[kernel]] void attention_bwd_dq<128, bfloat>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);

template [[host_name("attention_bwd_dk_d8_f32")]] [[kernel]] void attention_bwd_kv<8, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d8_f32")]] [[kernel]] void attention_bwd_kv<8, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d16_f32")]] [[kernel]] void attention_bwd_kv<16, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d16_f32")]] [[kernel]] void attention_bwd_kv<16, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d24_f32")]] [[kernel]] void attention_bwd_kv<24, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d24_f32")]] [[kernel]] void attention_bwd_kv<24, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d32_f32")]] [[kernel]] void attention_bwd_kv<32, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d32_f32")]] [[kernel]] void attention_bwd_kv<32, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d40_f32")]] [[kernel]] void attention_bwd_kv<40, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d40_f32")]] [[kernel]] void attention_bwd_kv<40, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d48_f32")]] [[kernel]] void attention_bwd_kv<48, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d48_f32")]] [[kernel]] void attention_bwd_kv<48, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d56_f32")]] [[kernel]] void attention_bwd_kv<56, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d56_f32")]] [[kernel]] void attention_bwd_kv<56, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d64_f32")]] [[kernel]] void attention_bwd_kv<64, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d64_f32")]] [[kernel]] void attention_bwd_kv<64, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d72_f32")]] [[kernel]] void attention_bwd_kv<72, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d72_f32")]] [[kernel]] void attention_bwd_kv<72, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d80_f32")]] [[kernel]] void attention_bwd_kv<80, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d80_f32")]] [[kernel]] void attention_bwd_kv<80, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d88_f32")]] [[kernel]] void attention_bwd_kv<88, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d88_f32")]] [[kernel]] void attention_bwd_kv<88, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d96_f32")]] [[kernel]] void attention_bwd_kv<96, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d96_f32")]] [[kernel]] void attention_bwd_kv<96, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d104_f32")]] [[kernel]] void attention_bwd_kv<104, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d104_f32")]] [[kernel]] void attention_bwd_kv<104, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d112_f32")]] [[kernel]] void attention_bwd_kv<112, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d112_f32")]] [[kernel]] void attention_bwd_kv<112, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d120_f32")]] [[kernel]] void attention_bwd_kv<120, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d120_f32")]] [[kernel]] void attention_bwd_kv<120, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d128_f32")]] [[kernel]] void attention_bwd_kv<128, float, true>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d128_f32")]] [[kernel]] void attention_bwd_kv<128, float, false>(device float*, const device float*, const device float*, const device float*, const device float*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);

template [[host_name("attention_bwd_dk_d32_f16")]] [[kernel]] void attention_bwd_kv<32, half, true>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d32_f16")]] [[kernel]] void attention_bwd_kv<32, half, false>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d64_f16")]] [[kernel]] void attention_bwd_kv<64, half, true>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d64_f16")]] [[kernel]] void attention_bwd_kv<64, half, false>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d96_f16")]] [[kernel]] void attention_bwd_kv<96, half, true>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d96_f16")]] [[kernel]] void attention_bwd_kv<96, half, false>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d128_f16")]] [[kernel]] void attention_bwd_kv<128, half, true>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d128_f16")]] [[kernel]] void attention_bwd_kv<128, half, false>(device half*, const device half*, const device half*, const device half*, const device half*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);

template [[host_name("attention_bwd_dk_d32_bf16")]] [[kernel]] void attention_bwd_kv<32, bfloat, true>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d32_bf16")]] [[kernel]] void attention_bwd_kv<32, bfloat, false>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d64_bf16")]] [[kernel]] void attention_bwd_kv<64, bfloat, true>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d64_bf16")]] [[kernel]] void attention_bwd_kv<64, bfloat, false>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d96_bf16")]] [[kernel]] void attention_bwd_kv<96, bfloat, true>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d96_bf16")]] [[kernel]] void attention_bwd_kv<96, bfloat, false>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dk_d128_bf16")]] [[kernel]] void attention_bwd_kv<128, bfloat, true>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
template [[host_name("attention_bwd_dv_d128_bf16")]] [[kernel]] void attention_bwd_kv<128, bfloat, false>(device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device bfloat*, const device float*, const device float*, constant AttnParams&, uint3, uint, uint, uint, uint, uint);
