package metal

// AliasHost (backend.go): a buffer over host memory used in place, on the
// recording driver: kernels read it, Free and GC cleanups release it only
// once no command buffer uses it, its owner (keep) is held until then, its
// memory never enters the pool, host writes panic, and memory that is not
// whole pages is refused with an error.

import (
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/metal/driver"
)

// pageAligned returns n bytes of Go memory starting on a driver.PageSize
// boundary, with capacity to the end of the last page.
func pageAligned(n int) []byte {
	c := roundUp(max(n, 1), driver.PageSize)
	raw := make([]byte, c+driver.PageSize)
	off := int(-uintptr(unsafe.Pointer(&raw[0])) & (driver.PageSize - 1))
	return raw[off : off+n : off+c]
}

// aliasInt32s aliases n int32s 0, 1, … in page-aligned memory; dropped
// reports whether the owner passed as keep has been collected.
func aliasInt32s(t *testing.T, b *Backend, n int) (x backend.Buffer, fb *fakeBuf, dropped func() bool) {
	t.Helper()
	mem := pageAligned(4 * n)
	for i := range n {
		binary.LittleEndian.PutUint32(mem[4*i:], uint32(i))
	}
	keep := &struct{ mem []byte }{mem}
	var gone atomic.Bool
	runtime.AddCleanup(keep, func(g *atomic.Bool) { g.Store(true) }, &gone)
	x, err := b.AliasHost(backend.Int32, mem, keep)
	if err != nil {
		t.Fatal(err)
	}
	fb = x.(*Buffer).blk.slab.buf.(*fakeBuf)
	if &fb.b[0] != &mem[0] || len(fb.b) != driver.PageSize*((4*n+driver.PageSize-1)/driver.PageSize) {
		t.Fatalf("the driver buffer is not the memory's whole pages (%d bytes)", len(fb.b))
	}
	return x, fb, func() bool {
		for range 20 {
			runtime.GC()
			if gone.Load() {
				return true
			}
		}
		return false
	}
}

// checkHeld requires the aliased buffer fb, freed or collected, to be
// held (its driver buffer and its owner) until release runs and the
// command buffer that used it completes, then released.
func checkHeld(t *testing.T, b *Backend, fb *fakeBuf, dropped func() bool, release func()) {
	t.Helper()
	// Allocations and their GC do not release it or hand out its memory.
	var xs []backend.Buffer
	for range 8 {
		y := b.Alloc(backend.Float32, driver.PageSize/4)
		if at(y).buf == driver.Buffer(fb) {
			t.Fatal("an Alloc was given the aliased memory")
		}
		xs = append(xs, y)
	}
	if fb.released || dropped() {
		t.Fatal("the aliased buffer was released, or its owner dropped, while a command buffer used it")
	}
	if st := b.PoolStats(); st.Mapped == 0 {
		t.Fatalf("Mapped = 0 before the release: %+v", st)
	}
	release()
	if !fb.released {
		t.Fatal("the aliased buffer was not released once its command buffer completed")
	}
	if !dropped() {
		t.Fatal("the owner (keep) is still reachable after the release")
	}
	if st := b.PoolStats(); st.Mapped != 0 {
		t.Fatalf("Mapped = %d after the release", st.Mapped)
	}
	for range 8 {
		if y := b.Alloc(backend.Float32, driver.PageSize/4); at(y).buf == driver.Buffer(fb) {
			t.Fatal("an Alloc was given the aliased memory")
		}
	}
	runtime.KeepAlive(xs)
}

func TestAliasHostFreeInFlight(t *testing.T) {
	b, d := newTest(t)
	n := 1000
	x, fb, dropped := aliasInt32s(t, b, n)
	if st := b.PoolStats(); st.Live != 0 || st.Bytes != 0 || st.Mapped != driver.PageSize {
		t.Fatalf("after AliasHost: %+v; want Mapped %d only", st, driver.PageSize)
	}
	y := b.Alloc(backend.Int32, n)
	b.copyBytes(y, x, 4*n)
	b.mu.Lock()
	b.flushLocked() // committed, not complete
	b.mu.Unlock()
	b.Free(x) // the fake panics if it is released now
	checkHeld(t, b, fb, dropped, func() { d.completeAll(); b.Alloc(backend.Int32, 1) })
	got := make([]int32, n)
	b.Read(y, got)
	for i, v := range got {
		if v != int32(i) {
			t.Fatalf("y[%d] = %d, want %d: the kernel did not read the aliased memory", i, v, i)
		}
	}
}

// TestAliasHostFreeOpen: a buffer freed while the open (not yet
// committed) command buffer binds it waits for that to complete.
func TestAliasHostFreeOpen(t *testing.T) {
	b, _ := newTest(t)
	x, fb, dropped := aliasInt32s(t, b, 5000)
	y := b.Alloc(backend.Int32, 5000)
	b.copyBytes(y, x, 4*5000)
	b.Free(x)
	checkHeld(t, b, fb, dropped, b.Sync)
}

// TestAliasHostCollected: the same when the Buffer becomes unreachable.
func TestAliasHostCollected(t *testing.T) {
	b, _ := newTest(t)
	y := b.Alloc(backend.Int32, 64)
	var fb *fakeBuf
	var dropped func() bool
	func() {
		var x backend.Buffer
		x, fb, dropped = aliasInt32s(t, b, 64)
		b.copyBytes(y, x, 4*64)
	}()
	waitReleased(t, b, 1)
	checkHeld(t, b, fb, dropped, b.Sync)
}

func TestAliasHostWriteRefused(t *testing.T) {
	b, _ := newTest(t)
	x, _, _ := aliasInt32s(t, b, 10)
	msg := mustPanic(t, func() { b.Write(x, []int32{1}) })
	if msg != "metal: write: the buffer is host memory used in place (a mapped model file) and is read-only" {
		t.Fatalf("panic %q", msg)
	}
	got := make([]int32, 10)
	b.Read(x, got)
	if got[9] != 9 {
		t.Fatalf("read %v", got)
	}
}

// noHostMemory is the recording driver without driver.HostMemory.
type noHostMemory struct{ driver.Driver }

func TestAliasHostRefused(t *testing.T) {
	b, _ := newTest(t)
	mem := pageAligned(2 * driver.PageSize)
	for _, c := range []struct {
		name string
		dt   backend.DType
		mem  []byte
		want string
	}{
		{"misaligned", backend.Float32, mem[256 : 256+4096], "not whole pages"},
		{"cap short of the page end", backend.Float32, mem[:4096:8192], "not whole pages"},
		{"empty", backend.Float32, mem[:0], "not a whole number"},
		{"partial element", backend.Int32, mem[:6], "not a whole number"},
		{"float64", backend.Float64, mem[:8], "float64 is not supported"},
	} {
		x, err := b.AliasHost(c.dt, c.mem, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, %v; want an error saying %q", c.name, x, err, c.want)
		}
	}
	if st := b.PoolStats(); st.Mapped != 0 {
		t.Errorf("Mapped = %d after refusals", st.Mapped)
	}
	nb := New(noHostMemory{newFakeDriver()})
	if _, err := nb.AliasHost(backend.Float32, mem, nil); !errors.Is(err, backend.ErrNoAlias) {
		t.Errorf("a driver without HostMemory: err = %v, want ErrNoAlias", err)
	}
}
