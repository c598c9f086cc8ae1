//go:build !amd64 || purego

package cpu

// Where the assembly does not build, the Go row primitives of rowops.go.

// rowMax32 returns max_j x_j (NaNs skipped, −Inf for an empty row).
func rowMax32(x []float32) float32 { return rowMax32Go(x) }

// dot32 returns Σ_j a_j·b_j in float64; b must be at least as long as a.
func dot32(a, b []float32) float64 { return dot32Go(a, b) }

// scale32 writes dst_j = float32(float64(src_j)·a); dst may alias src.
func scale32(dst, src []float32, a float64) { scale32Go(dst, src, a) }

// scaleMul32 writes dst_j = float32(float64(x_j)·a·float64(w_j)); dst may
// alias x.
func scaleMul32(dst, x, w []float32, a float64) { scaleMul32Go(dst, x, w, a) }
