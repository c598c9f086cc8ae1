package cpu

import "fmt"

// Attention's tile products (attention.go) are thin: a 32-row query block
// against D = 32 or 64 columns, or against the block's keys with k = D.
// Through a general gemm, each pays a call's setup and a packing of both
// operands for a few hundred thousand multiply-adds (OpenBLAS, SkylakeX
// kernels, on an Intel Xeon: 65 GFLOP/s for the forward at B16 H4 T128
// D32, half of it in the library). Where the gemm kernels in use are the
// AVX-512 ones, they run instead on attnTile, which packs nothing: C's
// rows go 8 at a time (then 1), its columns 32 at a time (the last block
// masked), the A values are broadcast from wherever they lie — a[i·sai +
// p·sap] serves Q·Kᵀ's row-major Q and dSᵀ·Q's transposed dS alike — and
// B's rows are read in place. Its operands (a 32-row block of Q, P or dS,
// a head's K, V, Kᵀ or Vᵀ) are in L1 or L2 already.
//
// Each element of C is one chain of FMAs over k in order, from zero, then
// alpha·sum, or alpha·sum + C as one FMA (attntile_avx512_amd64.s), so its
// value does not depend on the block it falls in: attention's results are
// the same for any worker count, and within attnbound's bound of the
// exact result as any summation order is.

// attnTileFn computes one block of rows (8, or 1 for the tail) of
// C = alpha·A·B (+ C when accum): strides and ldc, ldb in bytes.
type attnTileFn func(c *float32, ldc int, a *float32, sai, sap int, b *float32, ldb int, n, k int, alpha float32, accum bool)

// attnTileKernels is the kernel pair of a gemm kernel set that has one.
type attnTileKernels struct {
	rows8, rows1 attnTileFn
}

// attnTiles is the pair in use (set with the gemm kernels); rows8 is nil
// where the set in use has none, and attention's products go to gemm.
var attnTiles attnTileKernels

// attnProduct computes C (m, n) = alpha·A·B, or alpha·A·B + C when accum,
// with A's element (i, p) at a[i·sai + p·sap] (sai = lda, sap = 1 for a
// row-major A; sai = 1, sap = lda for Aᵀ), B (k, n) row-major with leading
// dimension ldb and C with ldc.
func attnProduct[T Float](accum bool, m, n, k int, alpha T, a []T, sai, sap int, b []T, ldb int, c []T, ldc int) {
	if m <= 0 || n <= 0 {
		return
	}
	if !isF32[T]() || attnTiles.rows8 == nil || k <= 0 {
		transA, lda := false, sai
		if sap != 1 {
			transA, lda = true, sap
		}
		var beta T
		if accum {
			beta = 1
		}
		gemm(transA, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if need := (m-1)*sai + (k-1)*sap + 1; len(a) < need {
		panic(fmt.Sprintf("cpu: attention tile: a has %d elements, needs %d", len(a), need))
	}
	if need := (k-1)*ldb + n; len(b) < need || ldb < n {
		panic(fmt.Sprintf("cpu: attention tile: b has %d elements and ld %d, needs %d and ≥ %d", len(b), ldb, need, n))
	}
	if need := (m-1)*ldc + n; len(c) < need || ldc < n {
		panic(fmt.Sprintf("cpu: attention tile: c has %d elements and ld %d, needs %d and ≥ %d", len(c), ldc, need, n))
	}
	a32, b32, c32, al := asF32(a), asF32(b), asF32(c), float32(alpha)
	i := 0
	for ; i+8 <= m; i += 8 {
		attnTiles.rows8(&c32[i*ldc], 4*ldc, &a32[i*sai], 4*sai, 4*sap, &b32[0], 4*ldb, n, k, al, accum)
	}
	for ; i < m; i++ {
		attnTiles.rows1(&c32[i*ldc], 4*ldc, &a32[i*sai], 4*sai, 4*sap, &b32[0], 4*ldb, n, k, al, accum)
	}
}
