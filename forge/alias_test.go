package forge

import (
	le "encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// aliasPage is the granule aligned host memory is cut to: Apple silicon's
// page, which Metal's no-copy buffers need.
const aliasPage = 16 << 10

// pagedBytes returns n bytes starting on an aliasPage boundary whose
// capacity reaches the end of their last page, filled with the float32s v
// (n = 4·len(v)).
func pagedBytes(v []float32) []byte {
	n := 4 * len(v)
	pages := (n + aliasPage - 1) / aliasPage * aliasPage
	raw := make([]byte, pages+aliasPage)
	off := int(-uintptr(unsafe.Pointer(&raw[0])) & (aliasPage - 1))
	mem := raw[off : off+n : off+pages]
	for i, x := range v {
		le.LittleEndian.PutUint32(mem[4*i:], math.Float32bits(x))
	}
	return mem
}

func randomFloats(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// An aliased tensor reads the given memory itself: its values, the ops
// over it, and a later change of the memory all show through.
func TestAliasBytesUsesTheMemoryInPlace(t *testing.T) {
	v := randomFloats(1, 48*40)
	mem := pagedBytes(v)
	w := EmptyOf(Float32, 48, 40).SetName("w")
	if err := w.AliasBytes(mem, nil); err != nil {
		t.Fatal(err)
	}
	if !w.ReadOnly() || !w.Reshape(40, 48).ReadOnly() {
		t.Fatal("an aliased tensor (or its view) is not read-only")
	}
	copyOf := FromSlice(v, 48, 40)
	sameBits(t, "values", w.Float32s(), v)
	x := FromSlice(randomFloats(2, 5*48), 5, 48)
	sameBits(t, "x @ w", x.MatMul(w).Float32s(), x.MatMul(copyOf).Float32s())
	sameBits(t, "x @ wᵀᵀ", x.MatMul(w.T().T()).Float32s(), x.MatMul(copyOf).Float32s())
	if !strings.Contains(w.String(), "read_only=true") {
		t.Fatalf("printed without its read-only flag: %s", w)
	}
	if c := w.Clone(); c.ReadOnly() {
		t.Fatal("a clone of an aliased tensor is read-only")
	}
	le.LittleEndian.PutUint32(mem[4*7:], math.Float32bits(42))
	w.Device().Sync()
	if got := w.Float32s()[7]; got != 42 {
		t.Fatalf("element 7 is %v after the memory changed to 42: the tensor is a copy", got)
	}
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

// Every op that would write an aliased tensor panics naming it, before
// any kernel runs, and leaves its memory as it was.
func TestAliasBytesRefusesWrites(t *testing.T) {
	v := randomFloats(3, 64)
	mem := pagedBytes(v)
	w := EmptyOf(Float32, 8, 8).SetName("blocks.0.w")
	if err := w.AliasBytes(mem, nil); err != nil {
		t.Fatal(err)
	}
	g, m, s := Ones(8, 8), Zeros(8, 8), Zeros(8, 8)
	for name, write := range map[string]func(){
		"copy_from":      func() { w.CopyFrom(Zeros(8, 8)) },
		"in-place scale": func() { w.MulScalarInPlace(2) },
		"view copy_from": func() { w.Reshape(64).CopyFrom(Zeros(64)) },
		"adamw": func() {
			AdamWUpdate(w, g, m, s, AdamWParams{LR: 0.1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, Step: 1})
		},
	} {
		err := Try(func() { NoGrad(write) })
		if err == nil || !strings.Contains(err.Error(), "blocks.0.w [8 8] is read-only") {
			t.Fatalf("%s: %v, want a read-only refusal naming the tensor", name, err)
		}
	}
	sameBits(t, "after the refused writes", w.Float32s(), v)
}

// What cannot be used in place is refused with a reason and leaves the
// tensor as it was.
func TestAliasBytesRefusals(t *testing.T) {
	v := randomFloats(4, 16)
	mem := pagedBytes(v)
	w := FromSlice(randomFloats(5, 16), 4, 4)
	before := w.Float32s()
	for what, c := range map[string]struct {
		t   *Tensor
		mem []byte
	}{
		"short":      {w, mem[:60]},
		"misaligned": {w, append(make([]byte, 1, 65), mem...)[1:65]},
		"a view":     {w.Reshape(16), mem},
	} {
		if err := c.t.AliasBytes(c.mem, nil); err == nil {
			t.Fatalf("%s: aliased", what)
		}
		if w.ReadOnly() {
			t.Fatalf("%s: refused but read-only", what)
		}
		sameBits(t, what, w.Float32s(), before)
	}
}

// The device holds keep while the tensor lives and lets it go when the
// tensor is gone, so keep's cleanup may unmap the memory then.
func TestAliasBytesHoldsKeep(t *testing.T) {
	var dropped atomic.Bool
	func() {
		owner := new([64]byte)
		runtime.AddCleanup(owner, func(*atomic.Bool) { dropped.Store(true) }, &dropped)
		w := EmptyOf(Float32, 16, 16)
		if err := w.AliasBytes(pagedBytes(randomFloats(6, 256)), owner); err != nil {
			t.Fatal(err)
		}
		owner = nil
		for range 3 {
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
		}
		if dropped.Load() {
			t.Fatal("keep was dropped while its tensor lives")
		}
		if s := w.Sum().Item(); math.IsNaN(s) {
			t.Fatal("NaN sum")
		}
	}()
	for i := 0; i < 200 && !dropped.Load(); i++ {
		runtime.GC()
		w := EmptyOf(Float32, 1) // a collection runs the backend's cleanups
		_ = w
		time.Sleep(5 * time.Millisecond)
	}
	if !dropped.Load() {
		t.Fatal("keep is still held after its tensor died")
	}
}
