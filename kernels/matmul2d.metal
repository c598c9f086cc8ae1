// matmul2d.metal — Backend.MatMul through Metal 4's tensor operations
// (MetalPerformancePrimitives' mpp::tensor_ops::matmul2d, MSL 4.0, macOS 26):
// dst[b] = a[b] @ bm[b] (dst += … when accumulating) for every batch index
// b, accumulated in float32 — the contract of matmul.metal's tiled kernels,
// for the layouts the Go side (metal/ops_matmul.go) routes here. On Apple
// GPUs with neural accelerators (the Apple10 family, M5 and A19 on) the
// tensor op runs on them; the simdgroup_matrix kernels of matmul.metal stay
// the fallback everywhere else.
//
// This file needs MSL 4.0: the Metal driver compiles it with
// MTLLanguageVersion4_0 (the other files stay MSL 3.1), and only on a device
// and OS that support it; a failed compile turns the variant off.
//
// Kernels (template matmul2d_t<TI, TO>): matmul2d_f32, matmul2d_f16_f32,
// matmul2d_f16, matmul2d_bf16_f32, matmul2d_bf16 — operands of TI (float,
// half, bfloat), dst of TO (float or TI). Each threadgroup of M2_SG = 4
// simdgroups (128 threads) computes an M2_BM × M2_BN = 64 × 32 block of dst
// with one matmul2d<…, execution_simdgroups<4>> over all of K
// (the descriptor's k is dynamic: the op reads K from the operands and
// walks it itself). Grid: (⌈N/32⌉, ⌈M/64⌉, batches).
//
// Operands are the tensors (tensor_inline: built in the kernel from the
// buffers) of the strided views matmul.metal takes, restricted to a unit
// stride along one axis: a's element (i, l) at i·a_rs + l·a_cs with
// a_cs = 1 (row-major: a tensor of extents (K, M), strides (1, a_rs)) or,
// mm_a_trans, a_rs = 1 (column-major: extents (M, K), strides (1, a_cs),
// and the descriptor's transpose_left); b likewise (row-major: extents
// (N, K); column-major: extents (K, N) and transpose_right). Coordinate 0
// of a tensor is its innermost (x) axis, and slice(x, y) moves the origin
// to (x, y) while the bounds stay the whole tensor's: the op checks the
// edges of a block against them, so M, N and K need not be tile multiples.
//
// The destination is a float32 cooperative tensor: each thread sets its
// elements to 0 — or, accumulating, to dst's old values (forge_widen) —
// before run (mode::multiply_accumulate: ct += a·b), and stores them after
// it, rounded once to TO (forge_narrow, the prelude's: forge_half.h; as
// matmul.metal and forge/half). Which elements a thread holds is the op's
// business (get_multidimensional_index: [0] the column, [1] the row of the
// block); elements outside M × N are neither read nor written. The
// descriptor asks for full precision (relaxed_precision false): half and
// bfloat products are exact in float32, so the roundings are the float32
// accumulation and, for a 16-bit dst, the one at the store.
//
// Function constants (the indices of matmul.metal's, which the Go side
// shares):
//   0 mm_a_trans    (bool): a is column-major (transpose_left).
//   1 mm_b_trans    (bool): b is column-major (transpose_right).
//   5 mm_accumulate (bool): dst += a@b.
// The four layouts are four instantiations of m2_block; the constants pick
// one when the pipeline is specialised.
//
// Verified only on the emulator (metal/emu: its shim implements the tensor
// ops as Apple's MPPTensorOpsMatMul2d.h documents them); no Apple compiler
// has seen this file yet. The macOS 26.0 SDK's header lists half operands
// only (float and bfloat ones appear in later 26.x headers): on an OS whose
// tensor ops lack a type, the file does not compile and the whole variant
// stays off.
#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace metal;
using namespace mpp::tensor_ops;

enum : uint {
    M2_BM = 64,                 // dst rows per threadgroup
    M2_BN = 32,                 // dst columns per threadgroup
    M2_SG = 4,                  // simdgroups per threadgroup (the op's execution scope)
    M2_THREADS = M2_SG * 32,    // threads per threadgroup
    M2_MAX_BATCH = 4
};

// MatMulParams is matmul.metal's parameter block, field for field (the Go
// side binds the same bytes; k_chunk and splits are unused here).
struct MatMulParams {
    uint m, n, k;
    int a_rs, a_cs;
    int b_rs, b_cs;
    int c_rs;
    uint nbatch;
    uint bshape[M2_MAX_BATCH];
    int a_bs[M2_MAX_BATCH];
    int b_bs[M2_MAX_BATCH];
    int c_bs[M2_MAX_BATCH];
    uint k_chunk;
    uint splits;
};

constant bool mm_a_trans [[function_constant(0)]];
constant bool mm_b_trans [[function_constant(1)]];
constant bool mm_accumulate [[function_constant(5)]];

// m2_batch_offsets sets the element offsets of batch z's matrices.
static inline void m2_batch_offsets(constant MatMulParams& p, uint z, thread int& ao, thread int& bo, thread int& co) {
    ao = 0;
    bo = 0;
    co = 0;
    for (int d = int(p.nbatch) - 1; d >= 0; d--) {
        const uint c = z % p.bshape[d];
        z /= p.bshape[d];
        ao += int(c) * p.a_bs[d];
        bo += int(c) * p.b_bs[d];
        co += int(c) * p.c_bs[d];
    }
}

// m2_operand is the tensor of a rows × cols operand whose element (i, j)
// is at i·rs + j·cs: row-major (cs = 1) as extents (cols, rows), strides
// (1, rs); column-major (trans, rs = 1) as extents (rows, cols), strides
// (1, cs).
template <bool Trans, typename T>
static inline auto m2_operand(device T* p, int rows, int cols, int rs, int cs) {
    if (Trans) {
        return tensor<device T, dextents<int32_t, 2>, tensor_inline>(p, dextents<int32_t, 2>(rows, cols), array<int32_t, 2>({1, cs}));
    }
    return tensor<device T, dextents<int32_t, 2>, tensor_inline>(p, dextents<int32_t, 2>(cols, rows), array<int32_t, 2>({1, rs}));
}

// m2_block computes the M2_BM × M2_BN block tg of c (rows of p.c_rs) from
// a and b (already offset to their matrices). Every thread of the
// threadgroup runs it (the op's scope is the whole threadgroup).
template <typename TI, typename TO, bool TL, bool TR>
static inline void m2_block(device TO* c, device TI* a, device TI* b, constant MatMulParams& p, uint2 tg) {
    const int m = int(p.m);
    const int n = int(p.n);
    const int k = int(p.k);
    const int row0 = int(tg.y * M2_BM);
    const int col0 = int(tg.x * M2_BN);

    // k: the descriptor's own default, "read K from the operands" (Apple's
    // headers have spelled that sentinel two ways), so the op walks all of K.
    constexpr int dynamic_k = matmul2d_descriptor(M2_BM, M2_BN).k;
    constexpr auto desc = matmul2d_descriptor(M2_BM, M2_BN, dynamic_k, TL, TR, false,
                                              matmul2d_descriptor::mode::multiply_accumulate);
    matmul2d<desc, execution_simdgroups<M2_SG>> op;

    // The block's rows of a and columns of b, from the origin of the block
    // to the end of the matrix (the op checks the edges against that).
    auto ta = m2_operand<TL>(a, m, k, p.a_rs, p.a_cs);
    auto tb = m2_operand<TR>(b, k, n, p.b_rs, p.b_cs);
    auto ma = TL ? ta.slice(row0, 0) : ta.slice(0, row0);
    auto mb = TR ? tb.slice(0, col0) : tb.slice(col0, 0);

    auto ct = op.template get_destination_cooperative_tensor<decltype(ma), decltype(mb), float>();
#pragma clang loop unroll(full)
    for (uint16_t i = 0; i < ct.get_capacity(); i++) {
        if (ct.is_valid_element(i)) {
            const auto ix = ct.get_multidimensional_index(i);
            const int r = row0 + int(ix[1]);
            const int q = col0 + int(ix[0]);
            float v = 0.0f;
            if (mm_accumulate && r < m && q < n) {
                v = forge_widen(c[r * p.c_rs + q]);
            }
            ct[i] = v;
        }
    }
    op.run(ma, mb, ct);
#pragma clang loop unroll(full)
    for (uint16_t i = 0; i < ct.get_capacity(); i++) {
        if (ct.is_valid_element(i)) {
            const auto ix = ct.get_multidimensional_index(i);
            const int r = row0 + int(ix[1]);
            const int q = col0 + int(ix[0]);
            if (r < m && q < n) {
                c[r * p.c_rs + q] = forge_narrow<TO>(ct[i]);
            }
        }
    }
}

template <typename TI, typename TO>
kernel void matmul2d_t(device TO* c [[buffer(0)]],
                       const device TI* a [[buffer(1)]],
                       const device TI* b [[buffer(2)]],
                       constant MatMulParams& p [[buffer(3)]],
                       uint3 tg [[threadgroup_position_in_grid]]) {
    int ao, bo, co;
    m2_batch_offsets(p, tg.z, ao, bo, co);
    // The tensors' element type is not const-qualified; nothing writes a or b.
    device TI* ap = (device TI*)(a + ao);
    device TI* bp = (device TI*)(b + bo);
    device TO* cp = c + co;
    if (mm_a_trans) {
        if (mm_b_trans) {
            m2_block<TI, TO, true, true>(cp, ap, bp, p, tg.xy);
        } else {
            m2_block<TI, TO, true, false>(cp, ap, bp, p, tg.xy);
        }
    } else {
        if (mm_b_trans) {
            m2_block<TI, TO, false, true>(cp, ap, bp, p, tg.xy);
        } else {
            m2_block<TI, TO, false, false>(cp, ap, bp, p, tg.xy);
        }
    }
}

// Instantiations: matmul2d_<operands>[_<dst>], the dst's dtype named only
// where it differs from the operands' (as matmul.metal's).
template [[host_name("matmul2d_f32")]] [[kernel]] void matmul2d_t<float, float>(device float*, const device float*, const device float*, constant MatMulParams&, uint3);
template [[host_name("matmul2d_f16_f32")]] [[kernel]] void matmul2d_t<half, float>(device float*, const device half*, const device half*, constant MatMulParams&, uint3);
template [[host_name("matmul2d_f16")]] [[kernel]] void matmul2d_t<half, half>(device half*, const device half*, const device half*, constant MatMulParams&, uint3);
template [[host_name("matmul2d_bf16_f32")]] [[kernel]] void matmul2d_t<bfloat, float>(device float*, const device bfloat*, const device bfloat*, constant MatMulParams&, uint3);
template [[host_name("matmul2d_bf16")]] [[kernel]] void matmul2d_t<bfloat, bfloat>(device bfloat*, const device bfloat*, const device bfloat*, constant MatMulParams&, uint3);
