//go:build amd64 && !purego

package cpu

// packRuns32AVX512 is packRuns for float32 with alpha 1 and width ≤ 32
// (pack_avx512_amd64.s); ld in elements, n, width ≥ 1.
//
//go:noescape
func packRuns32AVX512(dst, src *float32, ld, n, width, kc int)

func init() {
	if hasAVX512F() {
		packRuns32 = func(dst, src []float32, ld, n, width, kc int) {
			packRuns32AVX512(&dst[0], &src[0], ld, n, width, kc)
		}
	}
}
