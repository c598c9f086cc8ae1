package metal

import (
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// BenchmarkEncode measures the runtime's cost of one dispatch (arg
// bindings, pipeline lookup, encoding into the fake driver), the host-side
// overhead every kernel pays.
func BenchmarkEncode(b *testing.B) {
	be := New(newFakeDriver())
	x := be.Alloc(backend.Float32, 1024)
	y := be.Alloc(backend.Float32, 1024)
	b.ReportAllocs()
	for i := range b.N {
		be.copyBytes(y, x, 64)
		if i%1000 == 999 {
			be.Sync()
		}
	}
}

// BenchmarkAllocFree measures a pooled allocation and its release.
func BenchmarkAllocFree(b *testing.B) {
	be := New(newFakeDriver())
	b.ReportAllocs()
	for range b.N {
		be.Free(be.Alloc(backend.Float32, 4096))
	}
}

// BenchmarkEncodeConstants is BenchmarkEncode with a specialised pipeline
// (two function constants), as most ops use.
func BenchmarkEncodeConstants(b *testing.B) {
	be := New(newFakeDriver())
	x := be.Alloc(backend.Float32, 1024)
	key := pkeyFill2
	b.ReportAllocs()
	for i := range b.N {
		be.run("fill", key, [3]int{1, 1, 1}, [3]int{32, 1, 1}, be.arg(view(x)), bytesArg(uint32(4)), bytesArg(uint32(i)))
		if i%1000 == 999 {
			be.Sync()
		}
	}
}
