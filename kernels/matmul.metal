// matmul.metal — Backend.MatMul: dst[b] = a[b] @ bm[b] (dst += … when
// accumulating) for every batch index b, accumulated in float32.
//
// Mixed precision: every kernel is a template over the operands' type TI
// (float, half or bfloat) and, where it writes dst, dst's type TO (float,
// or the operands' 16-bit type): matmul_f32, matmul_f16_f32, matmul_f16,
// matmul_bf16_f32, matmul_bf16 (and the splitk, reduce and naive kernels
// likewise; see the instantiations at the end). 16-bit operands are staged
// as they are and multiplied as simdgroup_half8x8 / simdgroup_bfloat8x8
// fragments into simdgroup_float8x8 accumulators (the form llama.cpp's
// kernel_mul_mm uses): the product of two halfs or two bfloats is exact in
// float32, so the only roundings are the float32 accumulation and, for a
// 16-bit dst, one rounding at the store (to nearest even).
//
// Operands arrive as strided views: a's element (i, l) is at
// i·a_rs + l·a_cs, b's (l, j) at l·b_rs + j·b_cs. The backend's operands are
// row-major (a_cs == 1) or column-major (a_rs == 1, a transposed matrix seen
// through a view); neither is ever materialised. Batch dims (up to
// MM_MAX_BATCH after the Go side coalesced them) carry their own strides
// per operand, 0 for a broadcast operand.
//
// matmul_f32 (matmul_T) is the tiled kernel: each threadgroup of MM_SG
// simdgroups computes an MM_BM × MM_BN block of dst, staging MM_BM × MM_BK
// of a and MM_BK × MM_BN of b in threadgroup memory (rows padded by 16
// bytes) per step along K and multiplying 8×8 fragments of the operands'
// type (each simdgroup owns MM_FM × MM_FN simdgroup_float8x8 accumulator
// fragments). Tiles are staged by walking
// each operand's contiguous axis (so the loads coalesce for row- and
// column-major operands alike). Sizes that are not tile multiples are
// handled by function constants: predicated zero-filling loads, and edge
// fragments stored through a per-simdgroup 8×8 scratch with per-element
// bounds (always, for a 16-bit dst: rounded there). Tile geometry is
// enumerators, never `constant` variables (a
// program-scope `constant` is a memory object, not a compile-time constant:
// loops over it do not unroll and the fragments spill).
//
// The tile is a template parameter (MMTile): matmul_<dtypes> is the
// 32×32×16 edge kernel that takes every shape; matmul_<dtypes>_<BM>x<BN>x<BK>
// are the seed's tile table (metal/ops_matmul.go mmTable picks one by
// operand type and layout for products of whole tiles). Along K every
// tile multiplies the same 8×8 fragments in the same order, so the tiles
// agree bit for bit.
//
// Split-K (matmul_splitk_T, then matmul_reduce_T): for products with
// few output tiles and a long K — the weight gradients dW = xᵀ·dy of
// training, K = B·T — the tile grid alone leaves most of the GPU idle while
// each threadgroup walks all of K. matmul_splitk_T runs the same tiles
// with grid z = the split index s instead of the batch: threadgroup
// (x, y, s) multiplies K range [s·k_chunk, (s+1)·k_chunk) (k_chunk a
// multiple of MM_BK, the last range cut at K) into its own M × N slice of a
// float32 scratch buffer (partial s at s·M·N, rows of N; float32 for any
// operand type), and matmul_reduce_T adds the partials in the fixed order
// s = 0, 1, … into dst (dst's old value + the sum when accumulating),
// rounding once to dst's type. No atomics: the result
// does not depend on the thread schedule. The Go side
// (metal/ops_matmul.go) decides when to split and into how many parts.
//
// matmul_naive_f32 (matmul_naive_T) is the reference: one thread per
// output, a plain loop over K in float32. Tests compare the two, and the backend falls back to it.
//
// Function constants (matmul_T):
//   0 mm_a_trans    (bool): a is column-major (stage it walking i fastest).
//   1 mm_b_trans    (bool): b is column-major (stage it walking l fastest).
//   2 mm_align_m    (bool): M is a multiple of MM_BM.
//   3 mm_align_n    (bool): N is a multiple of MM_BN.
//   4 mm_align_k    (bool): K is a multiple of MM_BK.
//   5 mm_accumulate (bool): dst += a@b (also used by matmul_naive_T and
//                           matmul_reduce_T; false for matmul_splitk_T).
//   6 mm_vec_a      (bool): stage a four elements at a time along its
//                           contiguous axis (one 16-byte load for float):
//                           that axis has stride 1 and a length that is a
//                           multiple of 4, and the other stride, the batch
//                           strides and a's offset are multiples of 4, so
//                           every vector is aligned and wholly inside or
//                           outside the matrix. Otherwise (the edge path)
//                           one element at a time.
//   7 mm_vec_b      (bool): the same for b.
// matmul_splitk_T takes constants 0–7 too.
#include <metal_stdlib>
using namespace metal;

enum : uint {
    MM_BM = 32,                   // dst rows per threadgroup
    MM_BN = 32,                   // dst columns per threadgroup
    MM_BK = 16,                   // K per staged step
    MM_WM = 2,                    // simdgroups along M
    MM_WN = 2,                    // simdgroups along N
    MM_SG = MM_WM * MM_WN,        // simdgroups per threadgroup
    MM_THREADS = MM_SG * 32,      // threads per threadgroup
    MM_FM = MM_BM / (MM_WM * 8),  // accumulator fragments per simdgroup along M
    MM_FN = MM_BN / (MM_WN * 8),  // … along N
    MM_MAX_BATCH = 4,
    MM_NAIVE_TILE = 16            // matmul_naive_f32 threadgroups are 16 × 16
};

struct MatMulParams {
    uint m, n, k;
    int a_rs, a_cs;               // a (M, K): element (i, l) at i·a_rs + l·a_cs
    int b_rs, b_cs;               // b (K, N): element (l, j) at l·b_rs + j·b_cs
    int c_rs;                     // dst (M, N): element (i, j) at i·c_rs + j
    uint nbatch;                  // batch dims, 0 … MM_MAX_BATCH
    uint bshape[MM_MAX_BATCH];
    int a_bs[MM_MAX_BATCH];       // batch strides (0 where broadcast)
    int b_bs[MM_MAX_BATCH];
    int c_bs[MM_MAX_BATCH];
    uint k_chunk;                 // split-K: K per split (a multiple of MM_BK)
    uint splits;                  // split-K: number of partials (matmul_reduce_f32)
};

constant bool mm_a_trans [[function_constant(0)]];
constant bool mm_b_trans [[function_constant(1)]];
constant bool mm_align_m [[function_constant(2)]];
constant bool mm_align_n [[function_constant(3)]];
constant bool mm_align_k [[function_constant(4)]];
constant bool mm_accumulate [[function_constant(5)]];
constant bool mm_vec_a [[function_constant(6)]];
constant bool mm_vec_b [[function_constant(7)]];

// mm_batch_offsets sets the element offsets of batch z's matrices.
static inline void mm_batch_offsets(constant MatMulParams& p, uint z, thread int& ao, thread int& bo, thread int& co) {
    ao = 0;
    bo = 0;
    co = 0;
    for (int d = int(p.nbatch) - 1; d >= 0; d--) {
        uint c = z % p.bshape[d];
        z /= p.bshape[d];
        ao += int(c) * p.a_bs[d];
        bo += int(c) * p.b_bs[d];
        co += int(c) * p.c_bs[d];
    }
}

// ---- storage types -----------------------------------------------------------
// Operands (TI) are float, half or bfloat; dst (TO) is float or the
// operands' 16-bit type. The accumulators are float32 always; a 16-bit dst
// is widened (exactly, forge_widen) where accumulating and rounded once at
// the store (forge_narrow: the prelude, forge_half.h).

// MMStage is the staged-tile geometry for operand type TI: rows padded by
// 16 bytes (4 floats, 8 halfs) against bank conflicts.
template <typename TI, typename G> struct MMStage {
    enum : uint {
        PAD = 16 / sizeof(TI),
        LDA = G::BK + PAD,        // row length of the staged a tile (G::BM rows)
        LDB = G::BN + PAD         // row length of the staged b tile (G::BK rows)
    };
};

// MMTile is a threadgroup's tile geometry: a BM × BN block of dst, K
// staged BK at a time, WM × WN simdgroups each owning FM × FN 8×8
// accumulator fragments. Enumerators, so that the fragment loops unroll.
template <uint BM_, uint BN_, uint BK_, uint WM_, uint WN_> struct MMTile {
    enum : uint {
        BM = BM_,
        BN = BN_,
        BK = BK_,
        WM = WM_,
        WN = WN_,
        SG = WM_ * WN_,
        THREADS = WM_ * WN_ * 32,
        FM = BM_ / (WM_ * 8),
        FN = BN_ / (WN_ * 8)
    };
};

// The tiles: the edge tile (every shape, split-K) and the table's
// (metal/ops_matmul.go mmTable, from the seed's tile table: sizes that
// are multiples of the tile, by operand type and layout).
typedef MMTile<MM_BM, MM_BN, MM_BK, MM_WM, MM_WN> MMEdge;
typedef MMTile<64, 32, 32, 2, 2> MMT64x32x32;
typedef MMTile<32, 64, 16, 1, 2> MMT32x64x16;
typedef MMTile<64, 64, 16, 2, 2> MMT64x64x16;

// mm_frag_load_safe sets acc to dst's 8×8 block at (r, q), widened, zero
// outside M × N, through the simdgroup's 8×8 float scratch sc.
template <typename TO>
static inline void mm_frag_load_safe(thread simdgroup_float8x8& acc, const device TO* c, uint r, uint q,
                                     constant MatMulParams& p, threadgroup float* sc, uint lane) {
    for (uint e = lane; e < 64; e += 32) {
        const uint rr = r + e / 8;
        const uint cc = q + e % 8;
        sc[e] = (rr < p.m && cc < p.n) ? forge_widen(c[int(rr) * p.c_rs + int(cc)]) : 0.0f;
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_load(acc, sc, 8);
    simdgroup_barrier(mem_flags::mem_threadgroup);
}

// mm_frag_store_safe stores acc into dst's 8×8 block at (r, q), rounded to
// TO, inside M × N only, through sc.
template <typename TO>
static inline void mm_frag_store_safe(simdgroup_float8x8 acc, device TO* c, uint r, uint q,
                                      constant MatMulParams& p, threadgroup float* sc, uint lane) {
    simdgroup_store(acc, sc, 8);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    for (uint e = lane; e < 64; e += 32) {
        const uint rr = r + e / 8;
        const uint cc = q + e % 8;
        if (rr < p.m && cc < p.n) {
            c[int(rr) * p.c_rs + int(cc)] = forge_narrow<TO>(sc[e]);
        }
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
}

// mm_frag_load / mm_frag_store: a float dst in whole tiles moves straight
// between memory and the fragment; any other case goes through the scratch.
static inline void mm_frag_load(thread simdgroup_float8x8& acc, const device float* c, uint r, uint q,
                                constant MatMulParams& p, threadgroup float* sc, uint lane) {
    if (mm_align_m && mm_align_n) {
        simdgroup_load(acc, c + int(r) * p.c_rs + int(q), ulong(p.c_rs));
    } else {
        mm_frag_load_safe(acc, c, r, q, p, sc, lane);
    }
}
template <typename TO>
static inline void mm_frag_load(thread simdgroup_float8x8& acc, const device TO* c, uint r, uint q,
                                constant MatMulParams& p, threadgroup float* sc, uint lane) {
    mm_frag_load_safe(acc, c, r, q, p, sc, lane);
}
static inline void mm_frag_store(simdgroup_float8x8 acc, device float* c, uint r, uint q,
                                 constant MatMulParams& p, threadgroup float* sc, uint lane) {
    if (mm_align_m && mm_align_n) {
        simdgroup_store(acc, c + int(r) * p.c_rs + int(q), ulong(p.c_rs));
    } else {
        mm_frag_store_safe(acc, c, r, q, p, sc, lane);
    }
}
template <typename TO>
static inline void mm_frag_store(simdgroup_float8x8 acc, device TO* c, uint r, uint q,
                                 constant MatMulParams& p, threadgroup float* sc, uint lane) {
    mm_frag_store_safe(acc, c, r, q, p, sc, lane);
}

// mm_vec4 is the 4-vector of TI that mm_stage_vec_* move.
template <typename TI> using mm_vec4 = vec<TI, 4>;

// mm_stage_vec_a stages a's G::BM × G::BK tile at (row0, k0) four
// elements at a time along a's contiguous axis (mm_vec_a): k for a
// row-major a, i for a column-major one, whose vectors are scattered down
// the staged rows. Zero outside M × K: with M (column-major) or K
// (row-major) a multiple of 4, a vector is inside or outside as a whole.
template <typename TI, typename G>
static inline void mm_stage_vec_a(threadgroup TI* as, const device TI* a, constant MatMulParams& p,
                                  uint row0, uint k0, uint tid) {
    typedef MMStage<TI, G> S;
    typedef mm_vec4<TI> V;
    for (uint e = tid; e < G::BM * G::BK / 4; e += G::THREADS) {
        if (mm_a_trans) {
            const uint r = (e % (G::BM / 4)) * 4;
            const uint l = e / (G::BM / 4);
            const uint gi = row0 + r;
            const uint gl = k0 + l;
            V v = V(TI(0.0f));
            if ((mm_align_m || gi < p.m) && (mm_align_k || gl < p.k)) {
                v = *(const device V*)(a + int(gl) * p.a_cs + int(gi));
            }
#pragma clang loop unroll(full)
            for (uint t = 0; t < 4; t++) {
                as[(r + t) * S::LDA + l] = v[t];
            }
        } else {
            const uint r = e / (G::BK / 4);
            const uint l = (e % (G::BK / 4)) * 4;
            const uint gi = row0 + r;
            const uint gl = k0 + l;
            V v = V(TI(0.0f));
            if ((mm_align_m || gi < p.m) && (mm_align_k || gl < p.k)) {
                v = *(const device V*)(a + int(gi) * p.a_rs + int(gl));
            }
            *(threadgroup V*)(as + r * S::LDA + l) = v;
        }
    }
}

// mm_stage_vec_b is mm_stage_vec_a for b's G::BK × G::BN tile at (k0,
// col0): along j for a row-major b, along l (scattered down the staged
// rows) for a column-major one.
template <typename TI, typename G>
static inline void mm_stage_vec_b(threadgroup TI* bs, const device TI* b, constant MatMulParams& p,
                                  uint k0, uint col0, uint tid) {
    typedef MMStage<TI, G> S;
    typedef mm_vec4<TI> V;
    for (uint e = tid; e < G::BK * G::BN / 4; e += G::THREADS) {
        if (mm_b_trans) {
            const uint l = (e % (G::BK / 4)) * 4;
            const uint q = e / (G::BK / 4);
            const uint gl = k0 + l;
            const uint gj = col0 + q;
            V v = V(TI(0.0f));
            if ((mm_align_k || gl < p.k) && (mm_align_n || gj < p.n)) {
                v = *(const device V*)(b + int(gj) * p.b_cs + int(gl));
            }
#pragma clang loop unroll(full)
            for (uint t = 0; t < 4; t++) {
                bs[(l + t) * S::LDB + q] = v[t];
            }
        } else {
            const uint l = e / (G::BN / 4);
            const uint q = (e % (G::BN / 4)) * 4;
            const uint gl = k0 + l;
            const uint gj = col0 + q;
            V v = V(TI(0.0f));
            if ((mm_align_k || gl < p.k) && (mm_align_n || gj < p.n)) {
                v = *(const device V*)(b + int(gl) * p.b_rs + int(gj));
            }
            *(threadgroup V*)(bs + l * S::LDB + q) = v;
        }
    }
}

// mm_tiles computes the G::BM × G::BN block tg of c (rows of p.c_rs)
// from K range [kbeg, kend) of a and b (already offset to their matrices),
// staging through the threadgroup arrays as, bs and scratch. Operand
// fragments are simdgroup_matrix<TI, 8, 8> (float, half or bfloat), the
// accumulators simdgroup_float8x8 (a half × half or bfloat × bfloat product
// is exact in float32, so only the accumulation rounds).
template <typename TI, typename TO, typename G>
static inline void mm_tiles(device TO* c,
                            const device TI* a,
                            const device TI* b,
                            constant MatMulParams& p,
                            uint kbeg,
                            uint kend,
                            uint2 tg,
                            uint tid,
                            uint lane,
                            uint sg,
                            threadgroup mm_vec4<TI>* as4,
                            threadgroup mm_vec4<TI>* bs4,
                            threadgroup float* scratch) {
    typedef MMStage<TI, G> S;
    threadgroup TI* as = (threadgroup TI*)as4;
    threadgroup TI* bs = (threadgroup TI*)bs4;
    const uint row0 = tg.y * G::BM;
    const uint col0 = tg.x * G::BN;
    const uint sm = sg / G::WN;
    const uint sn = sg % G::WN;
    const uint frow = row0 + sm * (G::FM * 8); // this simdgroup's first dst row
    const uint fcol = col0 + sn * (G::FN * 8); // … and first dst column
    threadgroup float* sc = scratch + sg * 64;

    simdgroup_float8x8 acc[G::FM][G::FN];
#pragma clang loop unroll(full)
    for (uint i = 0; i < G::FM; i++) {
#pragma clang loop unroll(full)
        for (uint j = 0; j < G::FN; j++) {
            if (mm_accumulate) {
                mm_frag_load(acc[i][j], c, frow + i * 8, fcol + j * 8, p, sc, lane);
            } else {
                acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            }
        }
    }

    // Chunks start at multiples of G::BK and only the last ends off one, at
    // K: the loads' bound stays p.k.
    for (uint k0 = kbeg; k0 < kend; k0 += G::BK) {
        // Stage a (G::BM × G::BK) and b (G::BK × G::BN), zero outside.
        if (mm_vec_a) {
            mm_stage_vec_a<TI, G>(as, a, p, row0, k0, tid);
        } else
        for (uint e = tid; e < G::BM * G::BK; e += G::THREADS) {
            uint r, l;
            if (mm_a_trans) {
                r = e % G::BM;
                l = e / G::BM;
            } else {
                r = e / G::BK;
                l = e % G::BK;
            }
            const uint gi = row0 + r;
            const uint gl = k0 + l;
            TI v = TI(0.0f);
            if ((mm_align_m || gi < p.m) && (mm_align_k || gl < p.k)) {
                v = a[int(gi) * p.a_rs + int(gl) * p.a_cs];
            }
            as[r * S::LDA + l] = v;
        }
        if (mm_vec_b) {
            mm_stage_vec_b<TI, G>(bs, b, p, k0, col0, tid);
        } else
        for (uint e = tid; e < G::BK * G::BN; e += G::THREADS) {
            uint l, q;
            if (mm_b_trans) {
                l = e % G::BK;
                q = e / G::BK;
            } else {
                l = e / G::BN;
                q = e % G::BN;
            }
            const uint gl = k0 + l;
            const uint gj = col0 + q;
            TI v = TI(0.0f);
            if ((mm_align_k || gl < p.k) && (mm_align_n || gj < p.n)) {
                v = b[int(gl) * p.b_rs + int(gj) * p.b_cs];
            }
            bs[l * S::LDB + q] = v;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

#pragma clang loop unroll(full)
        for (uint kk = 0; kk < G::BK; kk += 8) {
            simdgroup_matrix<TI, 8, 8> af[G::FM];
            simdgroup_matrix<TI, 8, 8> bf[G::FN];
#pragma clang loop unroll(full)
            for (uint i = 0; i < G::FM; i++) {
                simdgroup_load(af[i], as + (sm * (G::FM * 8) + i * 8) * S::LDA + kk, S::LDA);
            }
#pragma clang loop unroll(full)
            for (uint j = 0; j < G::FN; j++) {
                simdgroup_load(bf[j], bs + kk * S::LDB + sn * (G::FN * 8) + j * 8, S::LDB);
            }
#pragma clang loop unroll(full)
            for (uint i = 0; i < G::FM; i++) {
#pragma clang loop unroll(full)
                for (uint j = 0; j < G::FN; j++) {
                    simdgroup_multiply_accumulate(acc[i][j], af[i], bf[j], acc[i][j]);
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

#pragma clang loop unroll(full)
    for (uint i = 0; i < G::FM; i++) {
#pragma clang loop unroll(full)
        for (uint j = 0; j < G::FN; j++) {
            mm_frag_store(acc[i][j], c, frow + i * 8, fcol + j * 8, p, sc, lane);
        }
    }
}

template <typename TI, typename TO, typename G>
kernel void matmul_t(device TO* c [[buffer(0)]],
                     const device TI* a [[buffer(1)]],
                     const device TI* b [[buffer(2)]],
                     constant MatMulParams& p [[buffer(3)]],
                     uint3 tg [[threadgroup_position_in_grid]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]],
                     uint sg [[simdgroup_index_in_threadgroup]]) {
    // Declared as 4-vectors so that mm_stage_vec_* may store vectors;
    // rows padded by 16 bytes (MMStage).
    threadgroup mm_vec4<TI> as4[G::BM * (G::BK + 16 / sizeof(TI)) / 4];
    threadgroup mm_vec4<TI> bs4[G::BK * (G::BN + 16 / sizeof(TI)) / 4];
    threadgroup float scratch[G::SG * 64];
    int ao, bo, co;
    mm_batch_offsets(p, tg.z, ao, bo, co);
    mm_tiles<TI, TO, G>(c + co, a + ao, b + bo, p, 0, p.k, tg.xy, tid, lane, sg, as4, bs4, scratch);
}

// matmul_splitk_T is matmul_T for one matrix (no batch dims) with grid z
// the split index: threadgroup (x, y, z) writes the product over K range
// [z·k_chunk, min((z+1)·k_chunk, K)) into partial z, c + z·M·N (the host
// passes c_rs = N), float32 whatever the operands. Chunks start at
// multiples of MM_BK and only the last ends off one, at K, so the loads
// keep their bound p.k. Specialised with constants 0–4 of matmul_T and
// mm_accumulate false.
template <typename TI>
kernel void matmul_splitk_t(device float* part [[buffer(0)]],
                            const device TI* a [[buffer(1)]],
                            const device TI* b [[buffer(2)]],
                            constant MatMulParams& p [[buffer(3)]],
                            uint3 tg [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup mm_vec4<TI> as4[MM_BM * (MM_BK + 16 / sizeof(TI)) / 4];
    threadgroup mm_vec4<TI> bs4[MM_BK * (MM_BN + 16 / sizeof(TI)) / 4];
    threadgroup float scratch[MM_SG * 64];
    const uint kbeg = tg.z * p.k_chunk;
    const uint kend = min(p.k, kbeg + p.k_chunk);
    mm_tiles<TI, float, MMEdge>(part + tg.z * p.m * p.n, a, b, p, kbeg, kend, tg.xy, tid, lane, sg, as4, bs4, scratch);
}

template <typename TI, typename TO>
kernel void matmul_naive_t(device TO* c [[buffer(0)]],
                           const device TI* a [[buffer(1)]],
                           const device TI* b [[buffer(2)]],
                           constant MatMulParams& p [[buffer(3)]],
                           uint3 pos [[thread_position_in_grid]]) {
    const uint j = pos.x;
    const uint i = pos.y;
    if (i >= p.m || j >= p.n) {
        return;
    }
    int ao, bo, co;
    mm_batch_offsets(p, pos.z, ao, bo, co);
    const device TI* ar = a + ao + int(i) * p.a_rs;
    const device TI* bc = b + bo + int(j) * p.b_cs;
    float s = 0.0f;
    for (uint l = 0; l < p.k; l++) {
        s = fma(forge_widen(ar[int(l) * p.a_cs]), forge_widen(bc[int(l) * p.b_rs]), s);
    }
    device TO* out = c + co + int(i) * p.c_rs + int(j);
    if (mm_accumulate) {
        s += forge_widen(*out);
    }
    *out = forge_narrow<TO>(s);
}

// matmul_reduce_T adds the p.splits partial products of a split-K matmul
// (partial s at part + s·M·N, rows of N, float32) in order s = 0, 1, …
// into dst (dst += the sum when accumulating), one thread per element,
// rounding once to dst's type.
template <typename TO>
kernel void matmul_reduce_t(device TO* c [[buffer(0)]],
                            const device float* part [[buffer(1)]],
                            constant MatMulParams& p [[buffer(2)]],
                            uint gid [[thread_position_in_grid]],
                            uint gsize [[threads_per_grid]]) {
    const uint mn = p.m * p.n;
    for (uint e = gid; e < mn; e += gsize) {
        float s = part[e];
        for (uint z = 1; z < p.splits; z++) {
            s += part[z * mn + e];
        }
        device TO* out = c + int(e / p.n) * p.c_rs + int(e % p.n);
        if (mm_accumulate) {
            s = forge_widen(*out) + s;
        }
        *out = forge_narrow<TO>(s);
    }
}

// Instantiations: matmul_<operands>[_<dst>], the dst's dtype named only
// where it differs from the operands'.
template [[host_name("matmul_f32")]] [[kernel]] void matmul_t<float, float, MMEdge>(device float*, const device float*, const device float*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_f32_64x32x32")]] [[kernel]] void matmul_t<float, float, MMT64x32x32>(device float*, const device float*, const device float*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_f32_32x64x16")]] [[kernel]] void matmul_t<float, float, MMT32x64x16>(device float*, const device float*, const device float*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_f16_f32")]] [[kernel]] void matmul_t<half, float, MMEdge>(device float*, const device half*, const device half*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_f16_f32_64x32x32")]] [[kernel]] void matmul_t<half, float, MMT64x32x32>(device float*, const device half*, const device half*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_f16_f32_64x64x16")]] [[kernel]] void matmul_t<half, float, MMT64x64x16>(device float*, const device half*, const device half*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_f16")]] [[kernel]] void matmul_t<half, half, MMEdge>(device half*, const device half*, const device half*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_f16_64x32x32")]] [[kernel]] void matmul_t<half, half, MMT64x32x32>(device half*, const device half*, const device half*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_f16_64x64x16")]] [[kernel]] void matmul_t<half, half, MMT64x64x16>(device half*, const device half*, const device half*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_bf16_f32")]] [[kernel]] void matmul_t<bfloat, float, MMEdge>(device float*, const device bfloat*, const device bfloat*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_bf16_f32_64x32x32")]] [[kernel]] void matmul_t<bfloat, float, MMT64x32x32>(device float*, const device bfloat*, const device bfloat*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_bf16_f32_64x64x16")]] [[kernel]] void matmul_t<bfloat, float, MMT64x64x16>(device float*, const device bfloat*, const device bfloat*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_bf16")]] [[kernel]] void matmul_t<bfloat, bfloat, MMEdge>(device bfloat*, const device bfloat*, const device bfloat*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_bf16_64x32x32")]] [[kernel]] void matmul_t<bfloat, bfloat, MMT64x32x32>(device bfloat*, const device bfloat*, const device bfloat*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_bf16_64x64x16")]] [[kernel]] void matmul_t<bfloat, bfloat, MMT64x64x16>(device bfloat*, const device bfloat*, const device bfloat*, constant MatMulParams&, uint3, uint, uint, uint);

template [[host_name("matmul_splitk_f32")]] [[kernel]] void matmul_splitk_t<float>(device float*, const device float*, const device float*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_splitk_f16")]] [[kernel]] void matmul_splitk_t<half>(device float*, const device half*, const device half*, constant MatMulParams&, uint3, uint, uint, uint);
template [[host_name("matmul_splitk_bf16")]] [[kernel]] void matmul_splitk_t<bfloat>(device float*, const device bfloat*, const device bfloat*, constant MatMulParams&, uint3, uint, uint, uint);

template [[host_name("matmul_naive_f32")]] [[kernel]] void matmul_naive_t<float, float>(device float*, const device float*, const device float*, constant MatMulParams&, uint3);
template [[host_name("matmul_naive_f16_f32")]] [[kernel]] void matmul_naive_t<half, float>(device float*, const device half*, const device half*, constant MatMulParams&, uint3);
template [[host_name("matmul_naive_f16")]] [[kernel]] void matmul_naive_t<half, half>(device half*, const device half*, const device half*, constant MatMulParams&, uint3);
template [[host_name("matmul_naive_bf16_f32")]] [[kernel]] void matmul_naive_t<bfloat, float>(device float*, const device bfloat*, const device bfloat*, constant MatMulParams&, uint3);
template [[host_name("matmul_naive_bf16")]] [[kernel]] void matmul_naive_t<bfloat, bfloat>(device bfloat*, const device bfloat*, const device bfloat*, constant MatMulParams&, uint3);

template [[host_name("matmul_reduce_f32")]] [[kernel]] void matmul_reduce_t<float>(device float*, const device float*, constant MatMulParams&, uint, uint);
template [[host_name("matmul_reduce_f16")]] [[kernel]] void matmul_reduce_t<half>(device half*, const device float*, constant MatMulParams&, uint, uint);
template [[host_name("matmul_reduce_bf16")]] [[kernel]] void matmul_reduce_t<bfloat>(device bfloat*, const device float*, constant MatMulParams&, uint, uint);
