package cpu

// gemm computes, single-threaded, the row-major product
//
//	C = alpha·op(A)·op(B) + beta·C
//
// with op(A) (m, k) and op(B) (k, n): A is read as (m, k) with leading
// dimension lda, or as (k, m) transposed when transA; likewise B. c is
// (m, n) with leading dimension ldc. When beta is 0, C is not read.
// It is safe to call from several goroutines at once.
func gemm[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	gemmRef(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gemmRef is the plain triple loop: the algorithmic reference the fast
// kernels are tested against.
func gemmRef[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s T
			for p := 0; p < k; p++ {
				var av, bv T
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += av * bv
			}
			if beta == 0 {
				c[i*ldc+j] = alpha * s
			} else {
				c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
			}
		}
	}
}
