package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAttnProduct: attnProduct, on the tile kernels where this CPU and
// the gemm kernels in use have them (else on gemm), is within gemmWant's
// rounding bound of the float64 product, for A row-major and transposed,
// with and without accumulation, at row counts around the 8-row block and
// column counts around the 16-lane vectors and 32-column blocks, with
// leading dimensions wider than the operands.
func TestAttnProduct(t *testing.T) {
	t.Logf("tile kernels in use: %v", attnTiles.rows8 != nil)
	r := rand.New(rand.NewPCG(41, 42))
	for _, m := range []int{1, 7, 8, 9, 17, 32} {
		for _, n := range []int{1, 15, 16, 17, 31, 32, 33, 64, 100} {
			for _, k := range []int{1, 5, 32, 64} {
				for _, trans := range []bool{false, true} {
					for _, accum := range []bool{false, true} {
						lda := k + 3 // A (m, k)
						if trans {
							lda = m + 2 // A stored (k, m)
						}
						ldb, ldc := n+5, n+1
						rows := m
						if trans {
							rows = k
						}
						a := randSlice[float32](r, rows*lda)
						b := randSlice[float32](r, k*ldb)
						c := randSlice[float32](r, m*ldc)
						alpha := float32(0.37)
						var beta float32
						if accum {
							beta = 1
						}
						want, bound := gemmWant(trans, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
						sai, sap := lda, 1
						if trans {
							sai, sap = 1, lda
						}
						got := slices.Clone(c)
						attnProduct(accum, m, n, k, alpha, a, sai, sap, b, ldb, got, ldc)
						if i, j, ratio := gemmErr(m, n, got, ldc, want, bound); ratio > 1 {
							t.Fatalf("m %d n %d k %d trans %v accum %v: c[%d,%d] = %v, want %v (error %.3g of the bound)",
								m, n, k, trans, accum, i, j, got[i*ldc+j], want[i*ldc+j], ratio)
						}
						for i := range m { // the padding between rows is not written
							for j := n; j < ldc && i*ldc+j < len(c); j++ {
								if math.Float32bits(got[i*ldc+j]) != math.Float32bits(c[i*ldc+j]) {
									t.Fatalf("m %d n %d k %d: wrote c[%d,%d] past n", m, n, k, i, j)
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestAttnProductPlaceFree: an element's bits do not depend on the row
// block or column block it falls in — a product of 19 rows and 77 columns
// equals, bit for bit, each of its rows computed alone and each column
// range computed from an offset — so attention's results do not depend
// on how its tiles are cut. (On gemm — BLAS or another Go kernel — that
// is not claimed: a library may block columns as it likes.)
func TestAttnProductPlaceFree(t *testing.T) {
	if attnTiles.rows8 == nil {
		t.Skip("no attention tile kernel in use (needs the AVX-512 gemm kernels)")
	}
	r := rand.New(rand.NewPCG(43, 44))
	const m, n, k = 19, 77, 40
	a := randSlice[float32](r, m*k)
	b := randSlice[float32](r, k*n)
	c0 := randSlice[float32](r, m*n)
	for _, accum := range []bool{false, true} {
		whole := slices.Clone(c0)
		attnProduct(accum, m, n, k, 0.5, a, k, 1, b, n, whole, n)
		for i := range m {
			row := slices.Clone(c0[i*n : (i+1)*n])
			attnProduct(accum, 1, n, k, 0.5, a[i*k:], k, 1, b, n, row, n)
			for j := range n {
				if math.Float32bits(row[j]) != math.Float32bits(whole[i*n+j]) {
					t.Fatalf("accum %v: row %d alone, column %d: %v, in the whole product %v", accum, i, j, row[j], whole[i*n+j])
				}
			}
		}
		for _, j0 := range []int{1, 13, 16, 40} {
			part := slices.Clone(c0)
			attnProduct(accum, m, n-j0, k, 0.5, a, k, 1, b[j0:], n, part[j0:], n)
			for i := range m {
				for j := j0; j < n; j++ {
					if math.Float32bits(part[i*n+j]) != math.Float32bits(whole[i*n+j]) {
						t.Fatalf("accum %v: columns from %d, element (%d, %d): %v, in the whole product %v", accum, j0, i, j, part[i*n+j], whole[i*n+j])
					}
				}
			}
		}
	}
}
