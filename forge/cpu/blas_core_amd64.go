//go:build amd64 && !purego

package cpu

// cpuFeatures reads the CPU's vendor and vector tier with CPUID, counting
// only what the OS also saves (XGETBV): AVX-512 needs F, BW, DQ, VL and CD
// (what OpenBLAS's SkylakeX kernels use) and the opmask and ZMM states.
func cpuFeatures() cpuInfo {
	maxLeaf, b, c, d := cpuidex(0, 0)
	var v [12]byte
	for i := range 4 {
		v[i], v[4+i], v[8+i] = byte(b>>(8*i)), byte(d>>(8*i)), byte(c>>(8*i))
	}
	info := cpuInfo{vendor: string(v[:])}
	if maxLeaf < 7 {
		return info
	}
	_, _, ecx1, _ := cpuidex(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if ecx1&(osxsave|avx) != osxsave|avx {
		return info
	}
	xcr0, _ := xgetbv0()
	if xcr0&6 != 6 {
		return info
	}
	info.tier = blasTierAVX
	_, ebx7, _, _ := cpuidex(7, 0)
	if ecx1&fma == 0 || ebx7&(1<<5) == 0 {
		return info
	}
	info.tier = blasTierAVX2
	const avx512 = 1<<16 | 1<<17 | 1<<28 | 1<<30 | 1<<31 // F, DQ, CD, BW, VL
	if ebx7&avx512 == avx512 && xcr0&0xE0 == 0xE0 {
		info.tier = blasTierAVX512
	}
	return info
}
