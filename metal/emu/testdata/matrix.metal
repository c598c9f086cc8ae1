// matrix.metal — simdgroup_matrix kernels for the emulator's tests.
#include <metal_stdlib>
using namespace metal;

struct MMAParams {
    uint lda, ldb, ldc;   // elements per row of a, b, c
    uint2 a_origin;       // (column, row) of the 8×8 block in a
    uint a_trans, b_trans;
};

// mma_8x8 computes d = op(a)·op(b) + c for one 8×8 block with one
// simdgroup; d is stored 8×8 row-major, and transposed into dt.
kernel void mma_8x8(device const float* a [[buffer(0)]],
                    device const float* b [[buffer(1)]],
                    device const float* c [[buffer(2)]],
                    device float* d [[buffer(3)]],
                    device float* dt [[buffer(4)]],
                    constant MMAParams& p [[buffer(5)]]) {
    simdgroup_float8x8 ma, mb, mc;
    simdgroup_load(ma, a, p.lda, ulong2(p.a_origin), p.a_trans != 0);
    simdgroup_load(mb, b, p.ldb, 0, p.b_trans != 0);
    simdgroup_load(mc, c, p.ldc);
    simdgroup_float8x8 md;
    simdgroup_multiply_accumulate(md, ma, mb, mc);
    simdgroup_store(md, d, 8);
    simdgroup_store(md, dt, 8, 0, true);
}

// mma_half multiplies half inputs into a float accumulator (the mixed
// form llama.cpp uses) through threadgroup memory.
kernel void mma_half(device const half* a [[buffer(0)]],
                     device const half* b [[buffer(1)]],
                     device float* d [[buffer(2)]],
                     uint lane [[thread_index_in_simdgroup]]) {
    threadgroup half ta[64];
    threadgroup half tb[64];
    ta[lane] = a[lane];
    ta[lane + 32] = a[lane + 32];
    tb[lane] = b[lane];
    tb[lane + 32] = b[lane + 32];
    simdgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_half8x8 ma, mb;
    simdgroup_load(ma, ta);
    simdgroup_load(mb, tb);
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
    simdgroup_multiply_accumulate(acc, ma, mb, acc);
    simdgroup_store(acc, d);
}

enum : uint { BM = 32, BN = 32, BK = 16, NT = 128 };

// gemm_sg: C (M×N) = A (M×K) · B, row-major; B is K×N, or N×K when
// b_trans (then loaded with simdgroup_load's transpose). M and N are
// multiples of 32, K of 16. Threadgroups of 128 threads: 4 simdgroups in
// a 2×2 grid, each computing a 16×16 block as 2×2 fragments.
kernel void gemm_sg(device const float* A [[buffer(0)]],
                    device const float* B [[buffer(1)]],
                    device float* C [[buffer(2)]],
                    constant uint4& dims [[buffer(3)]],  // M, N, K, b_trans
                    uint2 tg [[threadgroup_position_in_grid]],
                    uint tid [[thread_index_in_threadgroup]],
                    uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float As[BM * BK];
    threadgroup float Bs[BK * BN];
    const uint K = dims.z, N = dims.y;
    const bool bt = dims.w != 0;
    const uint row0 = tg.y * BM, col0 = tg.x * BN;
    const uint sr = (sg / 2) * 16, sc = (sg % 2) * 16;
    simdgroup_float8x8 acc[2][2];
    for (uint i = 0; i < 2; i++)
        for (uint j = 0; j < 2; j++) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint k0 = 0; k0 < K; k0 += BK) {
        for (uint i = tid; i < BM * BK; i += NT) {
            uint r = i / BK, c = i % BK;
            As[i] = A[(row0 + r) * K + k0 + c];
        }
        for (uint i = tid; i < BK * BN; i += NT) {
            if (bt) {
                uint n = i / BK, k = i % BK;  // Bs holds Bᵀ's tile: BN rows of BK
                Bs[i] = B[(col0 + n) * K + k0 + k];
            } else {
                uint r = i / BN, c = i % BN;
                Bs[i] = B[(k0 + r) * N + col0 + c];
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint kk = 0; kk < BK; kk += 8) {
            simdgroup_float8x8 a[2], b[2];
            for (uint i = 0; i < 2; i++) simdgroup_load(a[i], As + (sr + 8 * i) * BK + kk, BK);
            for (uint j = 0; j < 2; j++) {
                if (bt)
                    simdgroup_load(b[j], Bs + (sc + 8 * j) * BK + kk, BK, 0, true);
                else
                    simdgroup_load(b[j], Bs + kk * BN + sc + 8 * j, BN);
            }
            for (uint i = 0; i < 2; i++)
                for (uint j = 0; j < 2; j++) simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (uint i = 0; i < 2; i++)
        for (uint j = 0; j < 2; j++) simdgroup_store(acc[i][j], C + (row0 + sr + 8 * i) * N + col0 + sc + 8 * j, N);
}

// mma_inplace scales the rows of an 8×8 tile in threadgroup memory in
// place (load, multiply by a diagonal, store back to the same place), then
// every lane adds 1 to the element it owns and the tile is loaded again
// and stored to out. With lockstep loads and stores the result is
// diag·tile + 1 whatever order the lanes run in.
kernel void mma_inplace(device const float* in [[buffer(0)]],
                        device float* out [[buffer(1)]],
                        uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float tile[64];
    threadgroup float diag[64];
    for (uint i = lane; i < 64; i += 32) {
        tile[i] = in[i];
        diag[i] = (i % 9 == 0) ? float(i / 9 + 1) : 0.0f;  // diag(1..8)
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 m, dm;
    simdgroup_load(m, tile);
    simdgroup_load(dm, diag);
    simdgroup_multiply(m, dm, m);
    simdgroup_store(m, tile);
    tile[lane] += 1.0f;
    tile[lane + 32] += 1.0f;
    simdgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_load(m, tile);
    simdgroup_store(m, out);
}

// frag_mma loads 8×8 A and B fragment-wise through thread_elements (the
// MLX way: lane l owns (row, col), (row, col + 1)), multiplies, scales row
// r of the product by (r + 1) through thread_elements, and writes the
// result twice: through thread_elements into out0 and with simdgroup_store
// into out1.
kernel void frag_mma(device const float* a [[buffer(0)]],
                     device const float* b [[buffer(1)]],
                     device float* out0 [[buffer(2)]],
                     device float* out1 [[buffer(3)]],
                     ushort lane [[thread_index_in_simdgroup]]) {
    const short qid = lane / 4;
    const short row = (qid & 4) + ((lane / 2) % 4);
    const short col = (qid & 2) * 2 + (lane % 2) * 2;
    simdgroup_float8x8 ma, mb, mc;
    ma.thread_elements()[0] = a[row * 8 + col];
    ma.thread_elements()[1] = a[row * 8 + col + 1];
    thread float2& fb = mb.thread_elements();
    fb = float2(b[row * 8 + col], b[row * 8 + col + 1]);
    simdgroup_multiply(mc, ma, mb);
    mc.thread_elements() *= float(row + 1);
    float2 r = mc.thread_elements();
    out0[row * 8 + col] = r.x;
    out0[row * 8 + col + 1] = r.y;
    simdgroup_store(mc, out1);
}
