package metal

// The buffer pool.
//
// Allocating device memory (newBufferWithLength:) is a kernel VM call, far
// too slow for the thousands of tensors a training step makes and drops, so
// a Buffer is a 256-byte-aligned sub-allocation of a driver buffer, and
// freed sub-allocations are recycled by size class:
//
//   - A request is rounded up to its class: multiples of 256 bytes up to
//     4 KiB, then four classes per power of two (at most 25 % slack).
//   - Classes up to slabMaxClass are carved, on demand, from 1 MiB driver
//     buffers (slabs) dedicated to the class; larger classes get a driver
//     buffer of their own.
//   - A freed block goes to its class's free list only once every command
//     buffer that used it has completed: each block records the serial
//     number of the last command buffer that used it (block.use, set when a
//     kernel argument binds it), and the stream knows the serial up to which
//     every command buffer has completed (stream.done). Blocks freed earlier
//     wait on a deferred list, which the stream empties as it completes.
//
// The pool holds at most a budget of driver memory (FORGE_METAL_POOL_MB,
// default 4096; soft). When an allocation would exceed it, the backend
// first recycles what it can: blocks queued by GC cleanups, deferred blocks
// (after a Sync, if they wait for the current command buffer), then frees
// idle driver buffers, and finally asks for a garbage collection so that
// unreachable tensors give their buffers back. Only then does it grow past
// the budget. Independently, every poolGCBytes of new driver memory starts
// a background collection, as the CPU pool does: Go's collector does not
// see device memory, so it would otherwise run ever more rarely.

import (
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/metal/driver"
)

const (
	align        = 256     // sub-allocation alignment in bytes
	slabSize     = 1 << 20 // driver buffers small classes are carved from
	slabMaxClass = 256 << 10
	poolGCBytes  = 64 << 20 // new driver memory that starts a background GC
)

// classSize is the size class of a request of n bytes.
func classSize(n int) int {
	n = max(roundUp(n, align), align)
	if n <= 4096 {
		return n
	}
	p := 1 << (bits.Len(uint(n)) - 1) // p ≤ n < 2p
	return roundUp(n, p/4)
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// slab is one driver buffer: carved into blocks of one class, or a single
// block of a large class.
type slab struct {
	buf    driver.Buffer
	class  int
	carved int // bytes carved so far
	live   int // blocks handed out or deferred (not on a free list)
	// mapped: buf is host memory used in place (AliasHost), one block
	// that is none of the pool's: never on a free list, never trimmed,
	// handed out once. keep owns the memory; it is dropped when buf is
	// released, once no command buffer uses it.
	mapped bool
	keep   any
}

// block is one sub-allocation.
type block struct {
	slab *slab
	off  int    // byte offset in slab.buf
	size int    // the class size
	use  uint64 // serial of the last command buffer that used it; 0 if none
	// bound: a kernel argument bound the block since it was handed out
	// (a block reused within its command buffer holds, until then, only
	// the dead values of its previous life).
	bound bool
}

func (k *block) bytes() []byte { return k.slab.buf.Bytes()[k.off : k.off+k.size] }

// pool is the size-class pool of one backend. Its methods are called with
// the backend's mu held.
type pool struct {
	drv      driver.Driver
	free     map[int][]*block // completed blocks by class
	carving  map[int]*slab    // the slab a small class is carving from
	deferred []*block         // freed, waiting for their command buffer
	// current holds the blocks freed while the open command buffer
	// (serial currentSerial) was their last user, by class: a dispatch
	// encoded later in that command buffer runs after every earlier one
	// (a serial encoder), so a kernel may write them again before the
	// command buffer completes. Only a host write must not (hostCopy
	// gives such a block a different one). With FORGE_METAL_POOL_POISON
	// they are not reused: a poisoned block must come from the host, and
	// the tests that poison check kernels, not memory use.
	current       map[int][]*block
	currentSerial uint64
	slabs         map[*slab]struct{}
	// mappedWait holds the blocks of mapped slabs freed while a command
	// buffer still used them: released when it completes.
	mappedWait []*block
	budget     int64
	// workingSet is the device's recommended working set (0: unknown),
	// read once: the driver asks the GPU for it.
	workingSet int64
	poison     bool

	st PoolStats

	newSinceGC int64
	// noGCBelow: a forced collection that freed nothing is not repeated
	// until the pool has grown by a quarter (a working set larger than the
	// budget must not pay a collection per allocation).
	noGCBelow int64
	gcDone    chan struct{} // closed when the last collection started finished
}

// PoolStats describes the pool's memory in bytes and its traffic.
type PoolStats struct {
	Budget   int64 // the soft limit on Bytes (see poolBudget)
	Bytes    int64 // held in driver buffers
	Peak     int64 // highest Bytes so far
	Live     int64 // in blocks handed out and not freed
	Free     int64 // in blocks ready to be handed out
	Deferred int64 // freed, waiting for a command buffer to complete
	Mapped   int64 // in unreleased driver buffers over host memory (AliasHost); not in Bytes or Live

	Allocs    int64 // Alloc calls
	Hits      int64 // served from a free list
	NewBufs   int64 // driver buffers allocated
	Released  int64 // driver buffers released (trimmed)
	Pressure  int64 // times an allocation hit the budget
	GCs       int64 // collections the pool started
	PeakLive  int64 // highest Live so far
	Recycled  int64 // blocks returned to the free lists
	Deferrals int64 // blocks freed while a command buffer still used them
	Reused    int64 // blocks freed and handed out again within one command buffer
}

func (p *pool) init(drv driver.Driver) {
	p.drv = drv
	p.free = map[int][]*block{}
	p.current = map[int][]*block{}
	p.carving = map[int]*slab{}
	p.slabs = map[*slab]struct{}{}
	if ws, ok := drv.(driver.WorkingSet); ok {
		p.workingSet = max(ws.RecommendedWorkingSet(), 0)
	}
	p.budget = poolBudget(p.workingSet, os.Getenv("FORGE_METAL_POOL_MB"))
	p.st.Budget = p.budget
	p.poison = os.Getenv("FORGE_METAL_POOL_POISON") == "1"
}

// poolBudget is the pool's budget: FORGE_METAL_POOL_MB (env) if set, else
// nine tenths of the device's recommended working set (the rest for what
// is not pooled: pipelines, the driver's own buffers), else 4 GiB.
func poolBudget(workingSet int64, env string) int64 {
	if env != "" {
		if mb, err := strconv.Atoi(env); err == nil && mb > 0 {
			return int64(mb) << 20
		}
	}
	if workingSet > 0 {
		return workingSet / 10 * 9
	}
	return 4096 << 20
}

// take returns a completed free block of class c, if any.
func (p *pool) take(c int) *block {
	l := p.free[c]
	if len(l) == 0 {
		return nil
	}
	k := l[len(l)-1]
	l[len(l)-1] = nil
	p.free[c] = l[:len(l)-1]
	k.slab.live++
	p.st.Free -= int64(c)
	p.st.Hits++
	return k
}

// need is how many new driver bytes an allocation of class c costs.
func (p *pool) need(c int) int {
	if c > slabMaxClass {
		return c
	}
	if s := p.carving[c]; s != nil && s.carved+c <= slabSize {
		return 0
	}
	return slabSize
}

// grow makes a new block of class c, carving or allocating driver memory.
func (p *pool) grow(c int) *block {
	if c > slabMaxClass {
		s := p.newSlab(c, c)
		s.carved = c
		s.live = 1
		return &block{slab: s, size: c}
	}
	s := p.carving[c]
	if s == nil || s.carved+c > slabSize {
		s = p.newSlab(slabSize, c)
		p.carving[c] = s
	}
	k := &block{slab: s, off: s.carved, size: c}
	s.carved += c
	s.live++
	return k
}

func (p *pool) newSlab(size, class int) *slab {
	buf, err := p.drv.NewBuffer(size)
	if err != nil {
		panic(fmt.Sprintf("metal: allocating a %d-byte device buffer (pool holds %d bytes): %v", size, p.st.Bytes, err))
	}
	s := &slab{buf: buf, class: class}
	p.slabs[s] = struct{}{}
	p.st.NewBufs++
	p.st.Bytes += int64(size)
	p.st.Peak = max(p.st.Peak, p.st.Bytes)
	p.newSinceGC += int64(size)
	return s
}

// handOut accounts for a block leaving the pool.
func (p *pool) handOut(k *block) *block {
	k.bound = false
	p.st.Allocs++
	p.st.Live += int64(k.size)
	p.st.PeakLive = max(p.st.PeakLive, p.st.Live)
	if p.poison {
		b := k.bytes()
		for i := range b {
			b[i] = 0xff // NaN as float32, -1 as int32
		}
	}
	return k
}

// release takes back a block; done is the serial up to which every command
// buffer has completed, open the serial of the command buffer being
// encoded (0 if none).
func (p *pool) release(k *block, done, open uint64) {
	if k.slab.mapped {
		p.releaseMapped(k, done)
		return
	}
	p.st.Live -= int64(k.size)
	if open != 0 && k.use == open {
		p.sweepCurrent(open)
		p.current[k.size] = append(p.current[k.size], k)
		p.st.Deferred += int64(k.size)
		return
	}
	if k.use > done {
		p.deferred = append(p.deferred, k)
		p.st.Deferred += int64(k.size)
		p.st.Deferrals++
		return
	}
	p.toFree(k)
}

// releaseMapped takes back the block of a mapped slab: its driver buffer
// is released, and keep dropped, once every command buffer that used it
// has completed (use ≤ done; the open command buffer's serial is above
// done, so a block it binds waits for it to be committed and complete).
// Its memory is never handed out again.
func (p *pool) releaseMapped(k *block, done uint64) {
	if k.use > done {
		p.mappedWait = append(p.mappedWait, k)
		return
	}
	s := k.slab
	p.st.Mapped -= int64(s.buf.Size())
	s.buf.Release()
	s.buf, s.keep = nil, nil
}

// sweepCurrent moves the blocks of current to the deferred list if the
// command buffer they were freed in is no longer the open one (open).
func (p *pool) sweepCurrent(open uint64) {
	if p.currentSerial == open {
		return
	}
	for c, l := range p.current {
		for _, k := range l {
			p.deferred = append(p.deferred, k)
			p.st.Deferrals++
		}
		delete(p.current, c)
	}
	p.currentSerial = open
}

// takeCurrent returns a block of class c freed in the open command buffer
// (serial open, 0 if none), or nil.
func (p *pool) takeCurrent(c int, open uint64) *block {
	p.sweepCurrent(open)
	l := p.current[c]
	if open == 0 || len(l) == 0 || p.poison {
		return nil
	}
	k := l[len(l)-1]
	l[len(l)-1] = nil
	p.current[c] = l[:len(l)-1]
	p.st.Deferred -= int64(c)
	p.st.Reused++
	return k
}

func (p *pool) toFree(k *block) {
	k.slab.live--
	p.free[k.size] = append(p.free[k.size], k)
	p.st.Free += int64(k.size)
	p.st.Recycled++
}

// completed moves the deferred blocks whose command buffers have all
// completed (use ≤ done) to the free lists, and releases the mapped
// blocks that waited for them.
func (p *pool) completed(done uint64) {
	if len(p.mappedWait) > 0 {
		wait := p.mappedWait
		p.mappedWait = nil
		for _, k := range wait {
			p.releaseMapped(k, done)
		}
	}
	if p.currentSerial != 0 && p.currentSerial <= done {
		for c, l := range p.current {
			for _, k := range l {
				p.st.Deferred -= int64(k.size)
				p.toFree(k)
			}
			delete(p.current, c)
		}
	}
	if len(p.deferred) == 0 {
		return
	}
	kept := p.deferred[:0]
	for _, k := range p.deferred {
		if k.use <= done {
			p.st.Deferred -= int64(k.size)
			p.toFree(k)
		} else {
			kept = append(kept, k)
		}
	}
	clear(p.deferred[len(kept):])
	p.deferred = kept
}

// trim releases driver buffers none of whose blocks is in use or deferred,
// until at least want bytes are released (want ≤ 0: all of them).
func (p *pool) trim(want int64) int64 {
	var got int64
	idle := map[*slab]bool{}
	for s := range p.slabs {
		if s.live == 0 {
			idle[s] = true
		}
	}
	if len(idle) == 0 {
		return 0
	}
	// Largest first: fewer driver calls for the same memory.
	order := make([]*slab, 0, len(idle))
	for s := range idle {
		order = append(order, s)
	}
	slices.SortFunc(order, func(a, b *slab) int { return b.buf.Size() - a.buf.Size() })
	drop := map[*slab]bool{}
	for _, s := range order {
		if want > 0 && got >= want {
			break
		}
		drop[s] = true
		got += int64(s.buf.Size())
	}
	for c, l := range p.free {
		kept := l[:0]
		for _, k := range l {
			if drop[k.slab] {
				p.st.Free -= int64(k.size)
			} else {
				kept = append(kept, k)
			}
		}
		clear(l[len(kept):])
		if len(kept) == 0 {
			delete(p.free, c)
		} else {
			p.free[c] = kept
		}
	}
	for s := range drop {
		if p.carving[s.class] == s {
			delete(p.carving, s.class)
		}
		delete(p.slabs, s)
		p.st.Bytes -= int64(s.buf.Size())
		p.st.Released++
		s.buf.Release()
	}
	return got
}

// backgroundGC starts a collection if enough driver memory was allocated
// since the last one and none is running.
func (p *pool) backgroundGC() {
	if p.newSinceGC < poolGCBytes || p.gcBusy() {
		return
	}
	p.startGC()
}

// gcBusy reports whether a collection the pool started is still running.
func (p *pool) gcBusy() bool {
	if p.gcDone == nil {
		return false
	}
	select {
	case <-p.gcDone:
		return false
	default:
		return true
	}
}

// startGC starts a collection (or joins the running one) and returns a
// channel closed when it finishes.
func (p *pool) startGC() chan struct{} {
	if p.gcBusy() {
		return p.gcDone
	}
	p.newSinceGC = 0
	p.st.GCs++
	done := make(chan struct{})
	p.gcDone = done
	go func() {
		runtime.GC()
		close(done)
	}()
	return done
}

// allocLocked returns a block of at least size bytes. Called with mu held.
func (b *Backend) allocLocked(size int) *block {
	p := &b.pool
	c := classSize(size)
	b.drainReleased()
	p.sweepCurrent(b.stream.open())
	b.pollLocked()
	if k := p.take(c); k != nil {
		return p.handOut(k)
	}
	if k := p.takeCurrent(c, b.stream.open()); k != nil {
		return p.handOut(k)
	}
	if n := p.need(c); n > 0 && p.st.Bytes+int64(n) > p.budget {
		p.st.Pressure++
		if k := b.reclaim(c, int64(n)); k != nil {
			return p.handOut(k)
		}
	}
	k := p.grow(c)
	p.backgroundGC()
	return p.handOut(k)
}

// reclaim makes room for a block of class c needing n new bytes when the
// pool is at its budget, returning a block if one of class c became free.
func (b *Backend) reclaim(c int, n int64) *block {
	p := &b.pool
	fits := func() bool { return p.st.Bytes+n <= p.budget }
	try := func() *block {
		if k := p.take(c); k != nil {
			return k
		}
		if !fits() {
			p.trim(p.st.Bytes + n - p.budget)
		}
		return nil
	}
	// 1. Idle driver buffers of other classes (a step's tensors come in
	// many classes, and the free blocks of one do not serve another).
	if k := try(); k != nil || fits() {
		return k
	}
	// 2. Blocks waiting for the current or an in-flight command buffer.
	if p.st.Deferred > 0 {
		b.syncLocked()
		if k := try(); k != nil || fits() {
			return k
		}
	}
	// 3. Unreachable tensors: collect, then give the cleanups a moment to
	// queue their blocks.
	if p.st.Live > 0 && p.st.Bytes >= p.noGCBelow {
		<-p.startGC()
		deadline := time.Now().Add(5 * time.Millisecond)
		for {
			runtime.Gosched()
			b.relMu.Lock()
			n := len(b.released)
			b.relMu.Unlock()
			if n > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(200 * time.Microsecond) // let the rest of the batch arrive
		live := p.st.Live
		b.drainReleased()
		if p.st.Live == live {
			p.noGCBelow = p.st.Bytes + p.st.Bytes/4
		}
		if p.st.Deferred > 0 {
			b.syncLocked()
		}
		return try()
	}
	return nil
}

// PoolStats returns the pool's statistics.
func (b *Backend) PoolStats() PoolStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.drainReleased()
	return b.pool.st
}

// Trim releases every driver buffer of the pool that holds no live or
// deferred block (after recycling what GC cleanups queued), returning the
// bytes released.
func (b *Backend) Trim() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.drainReleased()
	b.pollLocked()
	return b.pool.trim(0)
}

// Memory reports the pool: blocks handed out (Live, and PeakLive as
// Peak), driver memory held (Bytes), and as Budget the device's
// recommended working set (0 if the driver does not know it). Mapped
// bytes are in none of them: that memory is the owner's (a mapped file's
// pages, which the system may evict and read again), not memory the
// backend took from the system or can give back.
func (b *Backend) Memory() backend.MemoryStats {
	st := b.PoolStats()
	return backend.MemoryStats{Live: st.Live, Peak: st.PeakLive, Held: st.Bytes, Budget: b.pool.workingSet}
}

// ResetPeak restarts the pool's peak statistics (Peak, PeakLive) from the
// current values, so that a caller can measure one phase.
func (b *Backend) ResetPeak() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.drainReleased()
	b.pool.st.Peak = b.pool.st.Bytes
	b.pool.st.PeakLive = b.pool.st.Live
}
