//go:build amd64 && !purego

package cpu

// c points at the eight float64 fields of adamwCoefs, in declaration order.
//
//go:noescape
func adamw32AVX512(w, gr, m, v *float32, n int, c *adamwCoefs)

// adamwSlice32 runs adamwSlice for float32 with AVX-512 (the same
// operations in the same order, so the same bits) and reports whether it
// did.
func adamwSlice32(c adamwCoefs, w, g, m, v []float32) bool {
	if !expAVX512 {
		return false
	}
	if n := len(w); n > 0 {
		adamw32AVX512(&w[0], &g[:n][0], &m[:n][0], &v[:n][0], n, &c)
	}
	return true
}
