//go:build amd64 && !purego

package cpu

// sgemmKernel6x16 computes the 6×16 float32 tile c (row stride ldc) =
// a·b over k steps (c += a·b when accumulate), a and b packed slivers.
//
//go:noescape
func sgemmKernel6x16(k int, a, b, c *float32, ldc int, accumulate bool)

// dgemmKernel6x8 is sgemmKernel6x16 for a 6×8 float64 tile.
//
//go:noescape
func dgemmKernel6x8(k int, a, b, c *float64, ldc int, accumulate bool)

func cpuidex(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
func xgetbv0() (eax, edx uint32)

// hasAVX2FMA reports whether the CPU has AVX2 and FMA and the OS saves the
// YMM registers.
func hasAVX2FMA() bool {
	maxLeaf, _, _, _ := cpuidex(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuidex(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if ecx1&(fma|osxsave|avx) != fma|osxsave|avx {
		return false
	}
	if xcr0, _ := xgetbv0(); xcr0&6 != 6 { // SSE and AVX state enabled
		return false
	}
	_, ebx7, _, _ := cpuidex(7, 0)
	return ebx7&(1<<5) != 0 // AVX2
}

func init() {
	if !hasAVX2FMA() {
		return
	}
	goKernelName = "go-avx2"
	kernel32 = gemmKernel[float32]{mr: 6, nr: 16, kc: 256, mc: 384, nc: 2048,
		fn: func(k int, a, b, c []float32, ldc int, accumulate bool) {
			sgemmKernel6x16(k, &a[0], &b[0], &c[0], ldc, accumulate)
		}}
	kernel64 = gemmKernel[float64]{mr: 6, nr: 8, kc: 256, mc: 192, nc: 1024,
		fn: func(k int, a, b, c []float64, ldc int, accumulate bool) {
			dgemmKernel6x8(k, &a[0], &b[0], &c[0], ldc, accumulate)
		}}
}
