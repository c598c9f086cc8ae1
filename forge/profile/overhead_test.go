package profile

import (
	"testing"

	"github.com/forgeml/forge/forge"
)

// BenchmarkTinyKernelsPlain and BenchmarkTinyKernelsProfiled measure what
// recording adds per kernel call (two clock reads, the record, the scope
// lookup): one op is 283 launches of a kernel on 8 elements — a tiny
// step's count — so that the difference between the two, divided by 283,
// is the cost per kernel, resolvable even on a machine too noisy to
// resolve it from whole steps.
func BenchmarkTinyKernelsPlain(b *testing.B) { benchTinyKernels(b, false) }

// BenchmarkTinyKernelsProfiled records each batch of 283 calls with Run.
func BenchmarkTinyKernelsProfiled(b *testing.B) { benchTinyKernels(b, true) }

func benchTinyKernels(b *testing.B, profiled bool) {
	x := forge.Randn(8)
	calls := func() {
		for range 283 {
			x.Neg()
		}
	}
	for b.Loop() {
		if profiled {
			Run(calls)
		} else {
			calls()
		}
	}
}
