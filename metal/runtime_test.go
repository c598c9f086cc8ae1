package metal

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/metal/driver"
)

func newTest(t *testing.T) (*Backend, *fakeDriver) {
	t.Helper()
	d := newFakeDriver()
	return New(d), d
}

func view(x backend.Buffer) backend.View {
	return backend.View{Buf: x, Shape: []int{x.Len()}, Strides: []int{1}}
}

var (
	keyCopy = driver.PipelineKey{Kernel: "copy_bytes"}
	keyFill = driver.PipelineKey{Kernel: "fill_u32"}
	// pkeyFill2 is fill_u32 specialised by two function constants.
	pkeyFill2 = driver.PipelineKey{Kernel: "fill_u32", Constants: []driver.Constant{
		{Index: 0, Type: driver.UInt32, Bits: 7}, {Index: 3, Type: driver.Bool, Bits: 1}}}
)

// copyBytes queues dst[:n bytes] = src[:n bytes].
func (b *Backend) copyBytes(dst, src backend.Buffer, n int) {
	b.run("copy_bytes", keyCopy, [3]int{1, 1, 1}, [3]int{32, 1, 1}, b.arg(view(dst)), b.arg(view(src)), bytesArg(uint32(n)))
}

// fill queues dst[:n] = v (as uint32 bits).
func (b *Backend) fillU32(dst backend.Buffer, n int, v uint32) {
	b.run("fill_u32", keyFill, [3]int{1, 1, 1}, [3]int{32, 1, 1}, b.arg(view(dst)), bytesArg(uint32(n)), bytesArg(v))
}

// mustPanic runs f and returns its panic message, failing if it does not
// panic.
func mustPanic(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatalf("no panic")
		}
		msg = fmt.Sprint(r)
	}()
	f()
	return ""
}

// where identifies a buffer's memory.
type where struct {
	buf driver.Buffer
	off int
}

func at(x backend.Buffer) where {
	k := x.(*Buffer).blk
	return where{k.slab.buf, k.off}
}

func TestManyOpsOneCommandBuffer(t *testing.T) {
	b, d := newTest(t)
	x := b.Alloc(backend.Int32, 64)
	y := b.Alloc(backend.Int32, 64)
	for i := range 50 {
		b.fillU32(x, 64, uint32(i))
		b.copyBytes(y, x, 256)
	}
	if c, w, n := d.counts(); c != 0 || w != 0 || n != 100 {
		t.Fatalf("before the read: %v; want 100 dispatches encoded, nothing committed", d)
	}
	got := make([]int32, 64)
	b.Read(y, got)
	if c, w, _ := d.counts(); c != 1 || w != 1 {
		t.Fatalf("after the read: %v; want one command buffer and one wait", d)
	}
	if got[0] != 49 || got[63] != 49 {
		t.Fatalf("read %v…, want 49s", got[:4])
	}
	b.Sync() // nothing queued: no new command buffer
	b.Read(y, got)
	if c, w, _ := d.counts(); c != 1 || w != 1 {
		t.Fatalf("idle Sync/Read: %v; want still one command buffer and one wait", d)
	}
	if st := b.StreamStats(); st.CommandBuffers != 1 || st.Dispatches != 100 || st.GPUTime != 100*time.Millisecond {
		t.Fatalf("stream stats %+v", st)
	}
}

// TestNoReuseBeforeCompletion: with FORGE_METAL_POOL_POISON (which turns
// off reuse within the open command buffer: TestReuseWithinCommandBuffer)
// a freed block waits for its command buffer to complete.
func TestNoReuseBeforeCompletion(t *testing.T) {
	b, _ := newTest(t)
	b.pool.poison = true
	x := b.Alloc(backend.Float32, 1000)
	mem := at(x)
	b.fillU32(x, 1000, 7)
	b.Free(x)
	reusedAfterSync(t, b, 1000, mem, "freed")
	if st := b.PoolStats(); st.NewBufs != 1 {
		t.Fatalf("pool allocated %d driver buffers, want 1 slab", st.NewBufs)
	}
}

func TestNoReuseWhileInFlight(t *testing.T) {
	b, d := newTest(t)
	x := b.Alloc(backend.Float32, 100_000) // a large class: its own driver buffer
	mem := at(x)
	b.fillU32(x, 10, 1)
	b.mu.Lock()
	b.flushLocked() // committed, not complete
	b.mu.Unlock()
	b.Free(x)
	y := b.Alloc(backend.Float32, 100_000)
	if at(y) == mem {
		t.Fatal("a buffer of an in-flight command buffer was handed out again")
	}
	if n := b.Trim(); n != 0 {
		t.Fatalf("Trim released %d bytes while they were in flight or live", n)
	}
	d.completeAll() // the GPU finishes; nobody waited yet
	z := b.Alloc(backend.Float32, 100_000)
	if at(z) != mem {
		t.Fatal("a buffer was not recycled after its command buffer completed (Done)")
	}
}

func TestNoReuseAfterGCBeforeCompletion(t *testing.T) {
	b, _ := newTest(t)
	b.pool.poison = true // as in TestNoReuseBeforeCompletion
	var mem where
	func() {
		x := b.Alloc(backend.Float32, 5000)
		mem = at(x)
		b.fillU32(x, 5000, 3)
	}()
	// x is unreachable: its cleanup queues the block.
	waitReleased(t, b, 1)
	reusedAfterSync(t, b, 5000, mem, "collected")
}

// reusedAfterSync requires the block at mem, released (how) while the
// pending command buffer uses it, not to be handed out to an Alloc of n
// float32s before Sync, and to be after.
func reusedAfterSync(t *testing.T, b *Backend, n int, mem where, how string) {
	t.Helper()
	y := b.Alloc(backend.Float32, n)
	if at(y) == mem {
		t.Fatalf("a %s buffer used by the pending command buffer was handed out again", how)
	}
	b.Sync()
	z := b.Alloc(backend.Float32, n)
	if at(z) != mem {
		t.Fatalf("a %s buffer was not recycled after its command buffer completed", how)
	}
	runtime.KeepAlive(y)
	runtime.KeepAlive(z)
}

// waitReleased collects garbage until GC cleanups queued n blocks.
func waitReleased(t *testing.T, b *Backend, n int) {
	t.Helper()
	for range 200 {
		runtime.GC()
		b.relMu.Lock()
		got := len(b.released)
		b.relMu.Unlock()
		if got >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("GC cleanups did not release %d buffers", n)
}

func TestAlignmentAndArgOffsets(t *testing.T) {
	b, _ := newTest(t)
	for _, n := range []int{0, 1, 3, 63, 64, 65, 1000, 4097, 70_000, 300_000} {
		x := b.Alloc(backend.Float32, n)
		k := x.(*Buffer).blk
		if k.off%align != 0 || k.size < max(4*n, 1) || k.off+k.size > k.slab.buf.Size() {
			t.Fatalf("n=%d: block at %d size %d in a %d-byte buffer", n, k.off, k.size, k.slab.buf.Size())
		}
		if n > 3 {
			a := b.arg(backend.View{Buf: x, Offset: 3, Shape: []int{1}, Strides: []int{1}})
			if a.drv.Buf != k.slab.buf || a.drv.Offset != k.off+12 || a.blk != k {
				t.Fatalf("n=%d: arg at %d, want %d", n, a.drv.Offset, k.off+12)
			}
		}
	}
	// Neighbouring blocks never overlap.
	seen := map[where]bool{}
	var keep []backend.Buffer
	for range 100 {
		x := b.Alloc(backend.Int32, 100)
		if seen[at(x)] {
			t.Fatal("two live buffers share memory")
		}
		seen[at(x)] = true
		keep = append(keep, x)
	}
	runtime.KeepAlive(keep)
}

// TestPeakBoundedExplicitFree: 2000 tensors of 256 KiB freed while the one
// pending command buffer still uses them. Without recycling: 500 MiB.
// Normally each is reused by the next allocation at once (a kernel encoded
// later runs after the earlier ones); with FORGE_METAL_POOL_POISON each
// waits for the command buffer, so only the budget (a sync when it is
// reached) bounds the pool.
func TestPeakBoundedExplicitFree(t *testing.T) {
	for _, poison := range []bool{false, true} {
		b, _ := newTest(t)
		b.pool.poison = poison
		b.pool.budget = 8 << 20
		x := b.Alloc(backend.Int32, 1024)
		for i := range 2000 {
			y := b.Alloc(backend.Int32, 64<<10) // 256 KiB
			b.fillU32(y, 16, uint32(i))
			b.copyBytes(x, y, 64)
			b.Free(y)
		}
		got := make([]int32, 16)
		b.Read(x, got)
		if got[0] != 1999 {
			t.Fatalf("poison %v: read %d, want 1999", poison, got[0])
		}
		st := b.PoolStats()
		switch {
		case poison && (st.Peak > 8<<20+slabSize || st.Pressure == 0 || st.Recycled == 0):
			t.Fatalf("poison, budget 8 MiB: peak %d bytes: %+v", st.Peak, st)
		case !poison && (st.Peak > 2*slabSize || st.Pressure != 0 || st.Reused != 1999 || b.StreamStats().Syncs != 1):
			t.Fatalf("budget 8 MiB: peak %d bytes, %d syncs: %+v; want two slabs, no pressure, one sync", st.Peak, b.StreamStats().Syncs, st)
		}
	}
}

func TestPeakBoundedGC(t *testing.T) {
	b, _ := newTest(t)
	b.pool.budget = 16 << 20
	x := b.Alloc(backend.Int32, 1024)
	for i := range 1000 {
		y := b.Alloc(backend.Int32, 1<<18) // 1 MiB, dropped without Free
		b.fillU32(y, 16, uint32(i))
		b.copyBytes(x, y, 64)
		if i%10 == 0 {
			b.Sync() // training steps: a sync now and then
		}
	}
	b.Sync()
	st := b.PoolStats()
	// Without recycling 1000 MiB; with it, the budget plus what the
	// collector has not found yet when the budget is hit.
	if st.Peak > 32<<20 {
		t.Fatalf("peak %d MiB with a 16 MiB budget: %+v", st.Peak>>20, st)
	}
	if st.Recycled == 0 {
		t.Fatalf("nothing recycled: %+v", st)
	}
}

func TestPeakBoundedSteps(t *testing.T) {
	// A training loop: many tensors per step, dropped, one sync a step. The
	// pool must reach a steady state with no new driver memory.
	b, _ := newTest(t)
	x := b.Alloc(backend.Int32, 1024)
	step := func(i int) {
		var tmp []backend.Buffer
		for j := range 20 {
			y := b.Alloc(backend.Int32, 1000*(j+1))
			b.fillU32(y, 8, uint32(i))
			b.copyBytes(x, y, 32)
			tmp = append(tmp, y)
		}
		for _, y := range tmp {
			b.Free(y)
		}
		got := make([]int32, 8)
		b.Read(x, got)
	}
	for i := range 3 {
		step(i)
	}
	before := b.PoolStats()
	for i := range 50 {
		step(i)
	}
	after := b.PoolStats()
	if after.NewBufs != before.NewBufs || after.Peak != before.Peak {
		t.Fatalf("steady state grew: before %+v after %+v", before, after)
	}
}

func TestTrim(t *testing.T) {
	b, _ := newTest(t)
	var xs []backend.Buffer
	for range 10 {
		xs = append(xs, b.Alloc(backend.Float32, 1<<20))
	}
	for _, x := range xs {
		b.Free(x)
	}
	if n := b.Trim(); n != 10*4<<20 {
		t.Fatalf("Trim released %d bytes, want 40 MiB", n)
	}
	if st := b.PoolStats(); st.Bytes != 0 || st.Free != 0 {
		t.Fatalf("after Trim: %+v", st)
	}
}

func TestPipelineCache(t *testing.T) {
	b, d := newTest(t)
	x := b.Alloc(backend.Int32, 16)
	k1 := driver.PipelineKey{Kernel: "fill_u32", Constants: []driver.Constant{{Index: 0, Type: driver.Bool, Bits: 1}}}
	k2 := driver.PipelineKey{Kernel: "fill_u32", Constants: []driver.Constant{{Index: 0, Type: driver.Bool, Bits: 0}}}
	for range 5 {
		for _, k := range []driver.PipelineKey{keyFill, k1, k2} {
			b.run("fill", k, [3]int{1, 1, 1}, [3]int{1, 1, 1}, b.arg(view(x)), bytesArg(uint32(1)), bytesArg(uint32(2)))
		}
	}
	var many []driver.Constant // more than the fast index takes
	for i := range fastConsts + 2 {
		many = append(many, driver.Constant{Index: i, Type: driver.UInt32, Bits: uint32(i)})
	}
	k3 := driver.PipelineKey{Kernel: "fill_u32", Constants: many}
	for range 3 {
		b.pipelineFor(k3)
	}
	b.Sync()
	for _, k := range []driver.PipelineKey{keyFill, k1, k2, k3} {
		if n := d.compiles[k.String()]; n != 1 {
			t.Fatalf("%s compiled %d times", k, n)
		}
	}
	if p := b.pipelineFor(k1); p.Key().String() != k1.String() || p.MaxThreads() != 1024 || d.compiles[k1.String()] != 1 {
		t.Fatalf("pipelineFor(%s) = %v", k1, p.Key())
	}
	// A compile error names the kernel and carries the driver's message;
	// it is not retried.
	bad := driver.PipelineKey{Kernel: "broken"}
	for range 2 {
		msg := mustPanic(t, func() { b.run("broken", bad, [3]int{1, 1, 1}, [3]int{1, 1, 1}) })
		if !strings.Contains(msg, "kernel broken") || !strings.Contains(msg, "broken.metal:3:5") {
			t.Fatalf("compile error: %q", msg)
		}
	}
	if d.compiles["broken"] != 1 {
		t.Fatalf("broken kernel compiled %d times", d.compiles["broken"])
	}
	// Threadgroups larger than the pipeline allows are refused.
	msg := mustPanic(t, func() { b.run("big", keyFill, [3]int{1, 1, 1}, [3]int{2048, 1, 1}, b.arg(view(x))) })
	if !strings.Contains(msg, "2048") {
		t.Fatalf("oversized threadgroup: %q", msg)
	}
}

func TestProfileMode(t *testing.T) {
	b, d := newTest(t)
	x := b.Alloc(backend.Int32, 64)
	y := b.Alloc(backend.Int32, 64)
	b.fillU32(x, 64, 1) // queued before: finished first, not timed
	b.fillU32(y, 64, 2)
	dur, ok := b.TimeKernels(func() {
		b.fillU32(x, 64, 5)
		b.copyBytes(y, x, 256)
		b.fillU32(x, 64, 6)
	})
	if !ok || dur != 3*time.Millisecond {
		t.Fatalf("TimeKernels = %v, %v; want 3ms (three kernels of 1ms)", dur, ok)
	}
	c, w, _ := d.counts()
	if c != 4 || w != 4 {
		t.Fatalf("profile mode: %v; want the queued work in one command buffer, then one per kernel, each waited", d)
	}
	for _, cb := range d.cbs[1:] {
		if len(cb.dispatches) != 1 {
			t.Fatalf("a profiled command buffer has %d dispatches", len(cb.dispatches))
		}
	}
	// Back to batching afterwards.
	b.fillU32(x, 64, 7)
	b.fillU32(x, 64, 8)
	if c2, _, _ := d.counts(); c2 != c {
		t.Fatal("kernels after TimeKernels were not batched")
	}
	got := make([]int32, 64)
	b.Read(y, got)
	if got[0] != 5 {
		t.Fatalf("y = %d, want 5", got[0])
	}
	b.Read(x, got)
	if got[0] != 8 {
		t.Fatalf("x = %d, want 8", got[0])
	}
	// A launch with no kernel took no device time.
	if dur, ok := b.TimeKernels(func() {}); !ok || dur != 0 {
		t.Fatalf("empty launch: %v %v", dur, ok)
	}
}

func TestWriteReadOrdering(t *testing.T) {
	b, d := newTest(t)
	x := b.Alloc(backend.Int32, 4)
	y := b.Alloc(backend.Int32, 4)
	// A fresh buffer: Write costs no sync.
	b.Write(x, []int32{1, 2, 3, 4})
	if c, _, _ := d.counts(); c != 0 {
		t.Fatal("Write to a fresh buffer synchronised")
	}
	b.copyBytes(y, x, 16) // queued: must copy 1 2 3 4
	// x is used by the pending command buffer: this Write must not change
	// what the queued copy reads.
	b.Write(x, []int32{9, 9, 9, 9})
	got := make([]int32, 4)
	b.Read(y, got)
	if got[0] != 1 || got[3] != 4 {
		t.Fatalf("y = %v: a Write overtook a queued kernel that reads its buffer", got)
	}
	b.Read(x, got)
	if got[0] != 9 {
		t.Fatalf("x = %v", got)
	}
	// A queued kernel writes y, then the host writes y: program order
	// wants the host's values.
	b.fillU32(y, 4, 5)
	b.Write(y, []int32{6, 6, 6, 6})
	b.Read(y, got)
	if got[0] != 6 {
		t.Fatalf("y = %v: a queued kernel's write overtook a later host Write", got)
	}
	// Read of a buffer no queued kernel uses does not sync.
	c0, w0, _ := d.counts()
	b.fillU32(y, 4, 7)
	b.Read(x, got)
	if c, w, _ := d.counts(); c != c0 || w != w0 {
		t.Fatal("Read of an idle buffer synchronised")
	}
	b.Read(y, got)
	if got[0] != 7 {
		t.Fatalf("y = %v, want 7s", got)
	}
	// The same for a committed command buffer still in flight.
	b.Write(x, []int32{1, 2, 3, 4})
	b.copyBytes(y, x, 16)
	b.mu.Lock()
	b.flushLocked()
	b.mu.Unlock()
	b.Write(x, []int32{8, 8, 8, 8})
	b.Read(y, got)
	if got[0] != 1 || got[3] != 4 {
		t.Fatalf("y = %v: a Write overtook an in-flight kernel that reads its buffer", got)
	}
	// Partial reads and writes; length checks.
	b.Write(x, []int32{42})
	b.Read(x, got[:2])
	if got[0] != 42 || got[1] != 8 {
		t.Fatalf("partial write/read: %v", got[:2])
	}
	if msg := mustPanic(t, func() { b.Write(x, make([]int32, 5)) }); !strings.Contains(msg, "5 elements") {
		t.Fatalf("oversized write: %q", msg)
	}
	if msg := mustPanic(t, func() { b.Read(x, make([]float32, 1)) }); !strings.Contains(msg, "[]float32") {
		t.Fatalf("dtype mismatch: %q", msg)
	}
}

func TestFloat64Refused(t *testing.T) {
	b, _ := newTest(t)
	for name, f := range map[string]func(){
		"alloc": func() { b.Alloc(backend.Float64, 4) },
		"write": func() { b.Write(b.Alloc(backend.Float32, 4), []float64{1}) },
		"read":  func() { b.Read(b.Alloc(backend.Float32, 4), make([]float64, 1)) },
	} {
		msg := mustPanic(t, f)
		if !strings.Contains(msg, "no float64") || !strings.Contains(msg, "cpu") {
			t.Errorf("%s: %q does not say Metal has no float64 and to use the cpu device", name, msg)
		}
	}
}

func TestCommandBufferError(t *testing.T) {
	b, _ := newTest(t)
	x := b.Alloc(backend.Int32, 4)
	b.fillU32(x, 4, 1)
	b.run("fault_kernel", driver.PipelineKey{Kernel: "fault"}, [3]int{1, 1, 1}, [3]int{1, 1, 1}, b.arg(view(x)))
	b.fillU32(x, 4, 2)
	msg := mustPanic(t, func() { b.Sync() })
	if !strings.Contains(msg, "fault_kernel") || !strings.Contains(msg, "GPU fault") {
		t.Fatalf("error %q does not name the kernel and the fault", msg)
	}
	// The backend recovers: the next work runs.
	b.fillU32(x, 4, 3)
	got := make([]int32, 4)
	b.Read(x, got)
	if got[0] != 3 {
		t.Fatalf("after an error: %v", got)
	}
	// In profile mode the failing kernel is alone in its command buffer.
	msg = mustPanic(t, func() {
		b.TimeKernels(func() {
			b.run("fault_kernel", driver.PipelineKey{Kernel: "fault"}, [3]int{1, 1, 1}, [3]int{1, 1, 1}, b.arg(view(x)))
		})
	})
	if !strings.Contains(msg, "kernel fault_kernel") {
		t.Fatalf("profile-mode error %q", msg)
	}
	if b.stream.profile {
		t.Fatal("profile mode left on after a failed launch")
	}
}

func TestFreeAndUseAfterFree(t *testing.T) {
	b, _ := newTest(t)
	x := b.Alloc(backend.Float32, 10)
	b.Free(x)
	b.Free(x) // no-op
	if msg := mustPanic(t, func() { b.arg(view(x)) }); !strings.Contains(msg, "after Free") {
		t.Fatalf("use after free: %q", msg)
	}
	if msg := mustPanic(t, func() { b.Read(x, make([]float32, 1)) }); !strings.Contains(msg, "after Free") {
		t.Fatalf("read after free: %q", msg)
	}
	// An optional operand (nil Buf) binds a dummy buffer.
	a := b.arg(backend.View{})
	if a.drv.Buf == nil || a.blk == nil {
		t.Fatal("nil view bound nothing")
	}
}

func TestBytesArg(t *testing.T) {
	type params struct {
		N     uint32
		Scale float32
		Dims  [2]int32
		_     uint32
		Flag  bool
	}
	a := bytesArg(params{N: 7, Scale: 1.5, Dims: [2]int32{-1, 3}, Flag: true})
	want := []byte{7, 0, 0, 0, 0, 0, 0xc0, 0x3f, 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0, 0, 0, 0, 0, 1}
	if a.drv.Buf != nil || a.blk != nil || string(a.drv.Bytes) != string(want) {
		t.Fatalf("bytesArg = % x, want % x", a.drv.Bytes, want)
	}
	if got := bytesArg(float32(-2)).drv.Bytes; math.Float32frombits(uint32(got[0])|uint32(got[1])<<8|uint32(got[2])<<16|uint32(got[3])<<24) != -2 {
		t.Fatalf("float32 scalar: % x", got)
	}
	if got := bytesArg(int32(-2)).drv.Bytes; string(got) != "\xfe\xff\xff\xff" {
		t.Fatalf("int32 scalar: % x", got)
	}
	for _, bad := range []any{1, 1.5, struct{ A int }{}, struct{ A float64 }{}, [2000]uint32{}} {
		mustPanic(t, func() { bytesArg(bad) })
	}
}

func TestClassSize(t *testing.T) {
	for n := 1; n < 1<<22; n = n*5/4 + 1 {
		c := classSize(n)
		if c < n || c%align != 0 || (n > 4096 && float64(c) > 1.25*float64(n)+align) {
			t.Fatalf("classSize(%d) = %d", n, c)
		}
		if classSize(c) != c {
			t.Fatalf("classSize(classSize(%d)) = %d, want %d", n, classSize(c), c)
		}
	}
}

func TestRegistration(t *testing.T) {
	names := backend.Names()
	for _, want := range []string{"metal", "metal-emu"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("backend %q is not registered (have %v)", want, names)
		}
	}
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		return
	}
	_, err := backend.Open("metal")
	if err == nil || !strings.Contains(err.Error(), "macOS on Apple silicon") || !strings.Contains(err.Error(), "FORGE_BACKEND=metal-emu") {
		t.Fatalf("opening metal on %s/%s: %v", runtime.GOOS, runtime.GOARCH, err)
	}
}

func TestOverBudgetWorkingSet(t *testing.T) {
	// A working set larger than the budget grows the pool without a forced
	// collection per allocation.
	b, _ := newTest(t)
	b.pool.budget = 4 << 20
	var keep []backend.Buffer
	start := time.Now()
	for range 100 {
		keep = append(keep, b.Alloc(backend.Int32, 1<<18)) // 1 MiB each, all live
	}
	st := b.PoolStats()
	if st.GCs > 25 || st.Bytes < 100<<20 {
		t.Fatalf("100 MiB live with a 4 MiB budget: %d collections, %+v (%v)", st.GCs, st, time.Since(start))
	}
	runtime.KeepAlive(keep)
}

// TestArgStampedWhenEncoded: a buffer bound (arg) before a command buffer
// is committed and encoded (run) after it belongs to the command buffer it
// is encoded into, whatever ran in between — another dispatch encoded
// into the first command buffer, and the commit. (When arg stamped the
// buffer, the other dispatch's run consumed the stamp list and the buffer
// kept the first command buffer's serial: its memory could be recycled
// while the second one still used it.)
func TestArgStampedWhenEncoded(t *testing.T) {
	b, _ := newTest(t)
	x, y := b.Alloc(backend.Int32, 8), b.Alloc(backend.Int32, 8)
	a := b.arg(view(x)) // bound now …
	b.fillU32(y, 8, 1)  // … another dispatch goes into command buffer 1 …
	b.Flush()           // … which is committed …
	b.run("fill_u32", keyFill, [3]int{1, 1, 1}, [3]int{32, 1, 1}, a, bytesArg(uint32(8)), bytesArg(uint32(2)))
	b.mu.Lock()
	defer b.mu.Unlock()
	if use, cur := x.(*Buffer).blk.use, b.stream.serial; use != cur {
		t.Fatalf("x is marked used by command buffer %d; it was encoded into %d", use, cur)
	}
}

// TestHalfWriteRead: Write and Read of float16 and bfloat16 buffers move
// their bit patterns unchanged, a shorter slice touches only its prefix,
// and a slice of another element type or length panics.
func TestHalfWriteRead(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		for _, n := range []int{1, 7, 1000} {
			buf := e.dev.Alloc(dt, n)
			if buf.DType() != dt || buf.Len() != n {
				t.Fatalf("Alloc(%v, %d): %v × %d", dt, n, buf.DType(), buf.Len())
			}
			in := make([]uint16, n)
			for i := range in {
				in[i] = uint16(e.rng.Uint32())
			}
			e.dev.Write(buf, in)
			out := make([]uint16, n)
			e.dev.Read(buf, out)
			for i := range in {
				if out[i] != in[i] {
					t.Fatalf("%v × %d: element %d reads %#04x, wrote %#04x", dt, n, i, out[i], in[i])
				}
			}
			// A shorter write and read touch only their prefix.
			e.dev.Write(buf, []uint16{0xabcd})
			short := make([]uint16, 1)
			e.dev.Read(buf, short)
			if short[0] != 0xabcd {
				t.Errorf("%v: short write/read: %#04x", dt, short[0])
			}
		}
		for name, fn := range map[string]func(){
			"write float32":  func() { e.dev.Write(e.dev.Alloc(dt, 2), []float32{1, 2}) },
			"read int32":     func() { e.dev.Read(e.dev.Alloc(dt, 2), make([]int32, 2)) },
			"write too many": func() { e.dev.Write(e.dev.Alloc(dt, 2), make([]uint16, 3)) },
		} {
			wantPanic(t, fmt.Sprintf("%v: %s", dt, name), fn, "")
		}
	}
	wantPanic(t, "[]uint16 into a float32 buffer", func() { e.dev.Write(e.dev.Alloc(backend.Float32, 2), []uint16{1, 2}) }, "")
}
