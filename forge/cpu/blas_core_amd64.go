//go:build amd64 && !purego

package cpu

import xcpu "golang.org/x/sys/cpu"

// cpuFeatures reads the CPU's vendor (CPUID leaf 0) and its vector tier
// from x/sys/cpu, which counts a feature only when the OS also saves its
// registers. AVX-512 needs F, BW, DQ, VL and CD: what OpenBLAS's SkylakeX
// kernels use.
func cpuFeatures() cpuInfo {
	_, b, c, d := cpuidex(0, 0)
	var v [12]byte
	for i := range 4 {
		v[i], v[4+i], v[8+i] = byte(b>>(8*i)), byte(d>>(8*i)), byte(c>>(8*i))
	}
	info := cpuInfo{vendor: string(v[:])}
	x := xcpu.X86
	switch {
	case x.HasAVX512F && x.HasAVX512BW && x.HasAVX512DQ && x.HasAVX512VL && x.HasAVX512CD:
		info.tier = blasTierAVX512
	case x.HasAVX2 && x.HasFMA:
		info.tier = blasTierAVX2
	case x.HasAVX:
		info.tier = blasTierAVX
	}
	return info
}
