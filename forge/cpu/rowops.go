package cpu

// Float32 row primitives of the softmax, norm and cross-entropy kernels:
//
//   - rowMax32: max_j x_j, NaNs skipped (−Inf for an empty row);
//   - dot32: Σ_j a_j·b_j accumulated in float64 (Σ x² as dot32(x, x));
//   - scale32: dst_j = float32(float64(src_j)·a);
//   - scaleMul32: dst_j = float32(float64(x_j)·a·float64(w_j)).
//
// On amd64 with AVX2 and FMA they are the assembly of rowops_amd64.s;
// elsewhere, and with the build tag purego, the Go loops of this file. The
// element-wise ones give the same bits either way (the same float64
// products, rounded once). dot32 sums exact float64 products in an order
// that depends only on the length (four partial sums here, sixteen in the
// assembly), so its value can differ between the two in the last bits of
// the float64 but never between calls or worker counts.

import "math"

// rowMax32Go is the portable rowMax32.
func rowMax32Go(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	return m
}

// dot32Go is the portable dot32.
func dot32Go(a, b []float32) float64 { return dotGo(a, b) }

// dotGo returns Σ_j a_j·b_j in float64 with four partial sums.
func dotGo[T Float](a, b []T) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	j := 0
	for ; j+4 <= len(a); j += 4 {
		a4, b4 := a[j:j+4:j+4], b[j:j+4:j+4]
		s0 += float64(a4[0]) * float64(b4[0])
		s1 += float64(a4[1]) * float64(b4[1])
		s2 += float64(a4[2]) * float64(b4[2])
		s3 += float64(a4[3]) * float64(b4[3])
	}
	for ; j < len(a); j++ {
		s0 += float64(a[j]) * float64(b[j])
	}
	return (s0 + s1) + (s2 + s3)
}

// scale32Go is the portable scale32.
func scale32Go(dst, src []float32, a float64) {
	dst = dst[:len(src)]
	for j, v := range src {
		dst[j] = float32(float64(v) * a)
	}
}

// scaleMul32Go is the portable scaleMul32.
func scaleMul32Go(dst, x, w []float32, a float64) {
	dst, w = dst[:len(x)], w[:len(x)]
	for j, v := range x {
		dst[j] = float32(float64(v) * a * float64(w[j]))
	}
}
