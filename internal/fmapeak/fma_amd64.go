//go:build amd64 && !purego

package fmapeak

import "golang.org/x/sys/cpu"

// fmaZMM and fmaYMM run n iterations of 24 FMAs (12 chains, twice) on ZMM
// or YMM registers with the constants at k ({mul, add, 1, 0}) and store the
// accumulators' sum (one vector) in out.
//
//go:noescape
func fmaZMM(n int, k *[4]float32, out *[16]float32)

//go:noescape
func fmaYMM(n int, k *[4]float32, out *[8]float32)

// vectorKernels: x/sys/cpu reports AVX-512F and AVX2 only when the OS
// also saves the registers' state (XGETBV).
func vectorKernels() []Kernel {
	var ks []Kernel
	if cpu.X86.HasAVX512F {
		ks = append(ks, Kernel{Name: "avx512-zmm", Lanes: 16, Chains: 12, Vector: true, perIter: 24, run: func(n int) float32 {
			var out [16]float32
			fmaZMM(n, &fmaConsts, &out)
			return sum(out[:])
		}})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, Kernel{Name: "avx2-ymm", Lanes: 8, Chains: 12, Vector: true, perIter: 24, run: func(n int) float32 {
			var out [8]float32
			fmaYMM(n, &fmaConsts, &out)
			return sum(out[:])
		}})
	}
	return ks
}

func sum(v []float32) float32 {
	var s float32
	for _, x := range v {
		s += x
	}
	return s
}
