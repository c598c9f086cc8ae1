//go:build arm64 && !purego

package fmapeak

// fmaNEON runs n iterations of 24 FMLAs (24 chains) on 128-bit vectors with
// the constants at k ({mul, add}) and stores the accumulators' sum in out.
//
//go:noescape
func fmaNEON(n int, k *[4]float32, out *[4]float32)

// vectorKernels: Advanced SIMD (NEON) is part of every arm64 CPU.
func vectorKernels() []Kernel {
	return []Kernel{{Name: "neon-q", Lanes: 4, Chains: 24, Vector: true, perIter: 24, run: func(n int) float32 {
		var out [4]float32
		fmaNEON(n, &fmaConsts, &out)
		return out[0] + out[1] + out[2] + out[3]
	}}}
}
