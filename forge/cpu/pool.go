package cpu

// A pool of large buffers, recycled when the garbage collector finds them
// unreachable.
//
// A training step allocates the same activation and gradient buffers
// every step (the tiny GPT ~280 MB a step, the small one ~900 MB) and
// drops them all by the next. With plain make, each allocation either
// zeroes recycled heap memory (memclr, which Go must do for a reused
// span) or touches fresh pages from the OS (a page fault per 4 KiB, the
// kernel zeroing each): in a CPU profile of the tiny step, memclr alone
// was 7 % of the samples (~20 ms of CPU a step), and the step spent ~20 ms
// outside kernels; with the pool, ~4 ms, and ~10 ms less CPU a step
// (medians of 5 interleaved runs). Here, a buffer of at least poolMinElems elements is registered
// with runtime.AddCleanup; when its *Buffer becomes unreachable (every
// tensor and view holding it is gone) the cleanup, run after a GC cycle,
// puts its slice on a free list keyed by dtype and exact length, and the
// next Alloc of that length takes it back without clearing it. The
// backend's contract already says Alloc's contents are unspecified: every
// kernel writes all of its output. FORGE_CPU_POOL_POISON=1 fills every
// buffer the pool hands out, new or recycled, with NaN (int32 with a
// sentinel), to catch a kernel that reads what it did not write.
//
// Lengths are exact (no size classes): a training loop asks for the same
// lengths every step, and a view's buffer keeps its tensor's length, so
// code that checks buf.Len() against Numel() keeps seeing equal values.
// The pool holds at most poolMaxBytes (FORGE_CPU_POOL_MB, default 2048;
// 0 turns the pool off); a buffer released when the pool is full is left
// to the garbage collector. Pooled memory counts as live heap.

import (
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/forgeml/forge/forge/backend"
)

// poolMinElems is the smallest buffer the pool recycles; smaller ones are
// cheap for the allocator and numerous.
const poolMinElems = 4096

// poolEntry is a recycled slice: exactly one field is non-nil (u16 for
// Float16 and BFloat16, told apart by the pool key's dtype).
type poolEntry struct {
	f32 []float32
	f64 []float64
	i32 []int32
	u16 []uint16
}

func (e poolEntry) bytes() int64 {
	return int64(len(e.f32))*4 + int64(len(e.f64))*8 + int64(len(e.i32))*4 + int64(len(e.u16))*2
}

type poolKey struct {
	dt uint8
	n  int
}

// bufPool is the free lists of one process (shared by every Backend:
// buffers are plain memory).
type bufPool struct {
	mu       sync.Mutex
	free     map[poolKey][]poolEntry
	bytes    int64 // held in free
	maxBytes int64
	poison   bool

	// live: bytes of the pooled-size buffers handed out and neither freed
	// nor collected yet; peak: the most since resetPeak.
	live, peak int64

	hits, misses int64 // Alloc calls served from the pool or by make
	puts         int64 // buffers returned by their cleanups (kept or not)

	// missBytes counts bytes made since the last collection this pool
	// started; gcRunning is set while one runs.
	missBytes int64
	gcRunning bool
	gcs       int64
}

// poolGCBytes is how many bytes of pool misses start a collection: the
// pool refills only when the garbage collector runs, and pooled memory
// counts as live heap, so left alone the collector would run ever more
// rarely and the misses, each a fresh allocation, would grow the heap
// instead (measured: 0.2 collections and 1.3 GB of heap a tiny step, with
// half the allocations missing). A miss is a sign that dead buffers are
// waiting for a collection.
const poolGCBytes = 32 << 20

var pool = newBufPool()

func newBufPool() *bufPool {
	p := &bufPool{free: map[poolKey][]poolEntry{}, maxBytes: 2048 << 20}
	if s := os.Getenv("FORGE_CPU_POOL_MB"); s != "" {
		if mb, err := strconv.Atoi(s); err == nil && mb >= 0 {
			p.maxBytes = int64(mb) << 20
		}
	}
	p.poison = os.Getenv("FORGE_CPU_POOL_POISON") == "1"
	return p
}

// recycle runs a collection, so that the cleanups of every buffer already
// unreachable put it back on the free lists, and waits (at most
// recycleWait in all) for the cleanups to have run: until a sentinel
// registered before the collection has had its cleanup run, and then until
// no buffer came back for recycleQuiet (cleanups run in no set order).
func (p *bufPool) recycle() {
	if p.maxBytes == 0 {
		return
	}
	done := make(chan struct{})
	sentinel := new([4]int64) // not a tiny allocation, whose cleanup may never run
	runtime.AddCleanup(sentinel, func(c chan struct{}) { close(c) }, done)
	sentinel = nil
	runtime.GC()
	p.mu.Lock()
	p.missBytes = 0
	p.mu.Unlock()
	deadline := time.Now().Add(recycleWait)
	t := time.NewTimer(recycleWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		return
	}
	for {
		p.mu.Lock()
		puts := p.puts
		p.mu.Unlock()
		if time.Now().Add(recycleQuiet).After(deadline) {
			return
		}
		time.Sleep(recycleQuiet)
		p.mu.Lock()
		quiet := p.puts == puts
		p.mu.Unlock()
		if quiet {
			return
		}
	}
}

// recycleWait bounds how long recycle waits for the cleanups it started;
// recycleQuiet is the pause without a returned buffer that ends the wait.
const (
	recycleWait  = 5 * time.Millisecond
	recycleQuiet = 50 * time.Microsecond
)

// get returns a pooled slice of exactly n elements of dt, if one is free.
func (p *bufPool) get(dt uint8, n int) (poolEntry, bool) {
	if p.maxBytes == 0 {
		return poolEntry{}, false
	}
	k := poolKey{dt, n}
	p.mu.Lock()
	l := p.free[k]
	if len(l) == 0 {
		p.misses++
		p.missBytes += int64(n) * int64(backend.DType(dt).Size())
		if p.missBytes >= poolGCBytes && !p.gcRunning {
			p.missBytes = 0
			p.gcRunning = true
			p.gcs++
			go func() {
				runtime.GC()
				p.mu.Lock()
				p.gcRunning = false
				p.mu.Unlock()
			}()
		}
		p.mu.Unlock()
		return poolEntry{}, false
	}
	e := l[len(l)-1]
	l[len(l)-1] = poolEntry{}
	p.free[k] = l[:len(l)-1]
	p.bytes -= e.bytes()
	p.hits++
	p.mu.Unlock()
	if p.poison {
		e.fillPoison()
	}
	return e, true
}

// put takes back a slice whose buffer became unreachable.
func (p *bufPool) put(dt uint8, e poolEntry) {
	n := e.bytes()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.puts++
	if p.bytes+n > p.maxBytes {
		return // full: the garbage collector frees it
	}
	k := poolKey{dt, len(e.f32) + len(e.f64) + len(e.i32) + len(e.u16)}
	p.free[k] = append(p.free[k], e)
	p.bytes += n
}

func (e poolEntry) fillPoison() {
	nan := float32(math.NaN())
	for i := range e.f32 {
		e.f32[i] = nan
	}
	for i := range e.f64 {
		e.f64[i] = math.NaN()
	}
	for i := range e.i32 {
		e.i32[i] = -0x5eed
	}
	for i := range e.u16 {
		e.u16[i] = 0xffff // a NaN in both Float16 and BFloat16
	}
}

// allocPooled returns a buffer of n ≥ poolMinElems elements of dt, from
// the pool or freshly made (zeroed), registered to return to the pool
// when it becomes unreachable.
func allocPooled(dt uint8, n int, make func() poolEntry) *Buffer {
	e, ok := pool.get(dt, n)
	if !ok {
		e = make()
		if pool.poison {
			e.fillPoison() // as if recycled
		}
	}
	b := &Buffer{F32: e.f32, F64: e.f64, I32: e.i32, dt: dt, pooled: true}
	switch backend.DType(dt) {
	case backend.Float16:
		b.F16 = e.u16
	case backend.BFloat16:
		b.BF16 = e.u16
	}
	pool.handOut(e.bytes())
	b.cleanup = runtime.AddCleanup(b, func(e poolEntry) { pool.release(dt, e) }, e)
	return b
}

// handOut counts n bytes more in buffers handed out.
func (p *bufPool) handOut(n int64) {
	p.mu.Lock()
	p.live += n
	p.peak = max(p.peak, p.live)
	p.mu.Unlock()
}

// release takes back the memory of a buffer freed or found unreachable.
func (p *bufPool) release(dt uint8, e poolEntry) {
	p.mu.Lock()
	p.live -= e.bytes()
	p.mu.Unlock()
	if p.maxBytes > 0 {
		p.put(dt, e)
	}
}

// memory reports the bytes in pooled-size buffers handed out and not yet
// freed or collected, and the most since resetPeak.
func (p *bufPool) memory() (live, peak int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live, p.peak
}

func (p *bufPool) resetPeak() {
	p.mu.Lock()
	p.peak = p.live
	p.mu.Unlock()
}
