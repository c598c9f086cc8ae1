package cpu

import (
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/forgeml/forge/forge/backend"
)

// TestPoolRecycles checks that a large buffer goes back to the pool once
// unreachable and is handed out again for the same dtype and length (and
// only for those), and that small buffers are zeroed and not pooled.
func TestPoolRecycles(t *testing.T) {
	if pool.maxBytes == 0 {
		t.Skip("pool disabled (FORGE_CPU_POOL_MB=0)")
	}
	be := New()
	const n = poolMinElems + 123
	b := be.Alloc(backend.Float32, n).(*Buffer)
	b.F32[0] = 42
	first := &b.F32[0]
	b = nil
	var got *Buffer
	for try := 0; try < 50 && got == nil; try++ {
		runtime.GC()
		time.Sleep(time.Millisecond) // cleanups run on their own goroutine
		pool.mu.Lock()
		free := len(pool.free[poolKey{uint8(backend.Float32), n}])
		hits := pool.hits
		pool.mu.Unlock()
		if free > 0 {
			got = be.Alloc(backend.Float32, n).(*Buffer)
			pool.mu.Lock()
			if pool.hits != hits+1 {
				t.Errorf("Alloc with a pooled buffer of that length did not take it (hits %d → %d)", hits, pool.hits)
			}
			pool.mu.Unlock()
		}
	}
	if got == nil {
		t.Fatal("the buffer never came back to the pool")
	}
	if len(got.F32) != n {
		t.Fatalf("recycled buffer has %d elements, want %d", len(got.F32), n)
	}
	if &got.F32[0] != first {
		t.Log("another buffer of that length was pooled first") // not an error
	}
	if other := be.Alloc(backend.Float64, n).(*Buffer); len(other.F64) != n || other.F32 != nil {
		t.Fatalf("float64 alloc got %d float64s and %d float32s", len(other.F64), len(other.F32))
	}
	small := be.Alloc(backend.Float32, 100).(*Buffer)
	for i, v := range small.F32 {
		if v != 0 {
			t.Fatalf("small buffer not zeroed at %d: %v", i, v)
		}
	}
	runtime.KeepAlive(got)
}

// TestPoolPoison checks that poisoning fills handed-out buffers with NaN.
func TestPoolPoison(t *testing.T) {
	prev := pool.poison
	pool.poison = true
	defer func() { pool.poison = prev }()
	b := New().Alloc(backend.Float32, poolMinElems).(*Buffer)
	if !math.IsNaN(float64(b.F32[0])) || !math.IsNaN(float64(b.F32[poolMinElems-1])) {
		t.Fatalf("poisoned buffer holds %v … %v", b.F32[0], b.F32[poolMinElems-1])
	}
}

// TestRecycle: after Recycle, the buffers of tensors dropped before it are
// back on the free lists — no further collection or waiting needed — so
// the next allocations of those lengths are hits.
func TestRecycle(t *testing.T) {
	if pool.maxBytes == 0 {
		t.Skip("pool disabled (FORGE_CPU_POOL_MB=0)")
	}
	be := New()
	const n, count = poolMinElems + 517, 8
	key := poolKey{uint8(backend.Float32), n}
	bufs := make([]*Buffer, count)
	for i := range bufs {
		bufs[i] = be.Alloc(backend.Float32, n).(*Buffer)
	}
	pool.mu.Lock()
	before := len(pool.free[key])
	pool.mu.Unlock()
	bufs = nil
	be.Recycle()
	// Recycle waits for the cleanups as long as they keep coming (5 ms at
	// most); a loaded machine may still delay the last ones, but no
	// further collection may be needed: poll without one.
	after := 0
	for try := 0; try < 1000; try++ { // up to a second on a loaded machine
		pool.mu.Lock()
		after = len(pool.free[key])
		pool.mu.Unlock()
		if after >= before+count {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if after < before+count {
		t.Fatalf("after Recycle the pool holds %d buffers of %d float32s, want at least %d", after, n, before+count)
	}
}

// TestPoolFreeAndMemory: Free hands a pooled buffer back at once (the next
// Alloc of its length takes the same memory, with no collection), and
// Memory counts pooled-size buffers handed out: up on Alloc, down on Free
// and when an unreachable buffer's cleanup runs; Peak holds the most since
// ResetPeak.
func TestPoolFreeAndMemory(t *testing.T) {
	if pool.maxBytes == 0 {
		t.Skip("pool disabled (FORGE_CPU_POOL_MB=0)")
	}
	be := New()
	const n = poolMinElems + 777 // a length no other test uses
	sz := int64(4 * n)
	for range 3 { // let earlier tests' dead buffers return first
		runtime.GC()
		time.Sleep(2 * time.Millisecond)
	}
	be.ResetPeak()
	base := be.Memory().Live
	a := be.Alloc(backend.Float32, n).(*Buffer)
	b := be.Alloc(backend.Float32, n).(*Buffer)
	if m := be.Memory(); m.Live-base != 2*sz || m.Peak-base != 2*sz {
		t.Fatalf("two buffers of %d bytes: %+v (base %d)", sz, m, base)
	}
	first := &a.F32[0]
	be.Free(a)
	be.Free(a) // twice: a no-op
	if m := be.Memory(); m.Live-base != sz || m.Peak-base != 2*sz {
		t.Fatalf("after Free: %+v (base %d)", m, base)
	}
	c := be.Alloc(backend.Float32, n).(*Buffer)
	if &c.F32[0] != first {
		t.Errorf("the freed buffer's memory was not handed out again by the next Alloc of its length")
	}
	be.ResetPeak()
	if m := be.Memory(); m.Peak != m.Live {
		t.Errorf("after ResetPeak: %+v", m)
	}
	be.Free(c)
	b = nil
	deadline := time.Now().Add(2 * time.Second)
	for be.Memory().Live-base != 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if m := be.Memory(); m.Live-base != 0 {
		t.Errorf("after the last buffer became unreachable: %+v (base %d)", m, base)
	}
	runtime.KeepAlive(b)
}
