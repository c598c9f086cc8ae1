//go:build amd64 && !purego

package cpu

// The AVX2/FMA row primitives of rowops_amd64.s, used where the exp
// kernels find AVX2 and FMA (expAVX2), else the Go loops of rowops.go.
// They take any n ≥ 0.

//go:noescape
func rowMax32AVX2(x *float32, n int) float32

//go:noescape
func dot32AVX2(a, b *float32, n int) float64

//go:noescape
func scale32AVX2(dst, src *float32, n int, a float64)

//go:noescape
func scaleMul32AVX2(dst, x, w *float32, n int, a float64)

// rowMax32 returns max_j x_j (NaNs skipped, −Inf for an empty row).
func rowMax32(x []float32) float32 {
	if !expAVX2 || len(x) == 0 {
		return rowMax32Go(x)
	}
	return rowMax32AVX2(&x[0], len(x))
}

// dot32 returns Σ_j a_j·b_j in float64; b must be at least as long as a.
func dot32(a, b []float32) float64 {
	if !expAVX2 || len(a) == 0 {
		return dot32Go(a, b)
	}
	return dot32AVX2(&a[0], &b[:len(a)][0], len(a))
}

// scale32 writes dst_j = float32(float64(src_j)·a); dst may alias src.
func scale32(dst, src []float32, a float64) {
	if !expAVX2 || len(src) == 0 {
		scale32Go(dst, src, a)
		return
	}
	scale32AVX2(&dst[:len(src)][0], &src[0], len(src), a)
}

// scaleMul32 writes dst_j = float32(float64(x_j)·a·float64(w_j)); dst may
// alias x.
func scaleMul32(dst, x, w []float32, a float64) {
	if !expAVX2 || len(x) == 0 {
		scaleMul32Go(dst, x, w, a)
		return
	}
	scaleMul32AVX2(&dst[:len(x)][0], &x[0], &w[:len(x)][0], len(x), a)
}
