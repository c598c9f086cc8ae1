package metal

// A recording driver: it keeps every dispatch, lets the test decide when a
// committed command buffer completes, and runs a few toy kernels on the
// host when (and only when) a command buffer completes, as a GPU would, so
// that ordering mistakes of the runtime change the results.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/forgeml/forge/metal/driver"
)

type fakeDriver struct {
	mu        sync.Mutex
	name      string
	bufs      []*fakeBuf
	cbs       []*fakeCB
	compiles  map[string]int
	perKernel time.Duration // GPU time charged per dispatch
	// holdCompletion: committed command buffers complete only in Wait or
	// complete(); otherwise Done reports them complete right after Commit.
	holdCompletion bool
	// keepless: forget completed command buffers (a long run would keep
	// every dispatch otherwise); counts then covers the ones in flight.
	keepless bool
	// workingSet is what RecommendedWorkingSet reports (0: unknown).
	workingSet int64
}

func (d *fakeDriver) RecommendedWorkingSet() int64 { return d.workingSet }

func newFakeDriver() *fakeDriver {
	return &fakeDriver{name: "metal-fake", compiles: map[string]int{}, perKernel: time.Millisecond, holdCompletion: true}
}

func (d *fakeDriver) Name() string   { return d.name }
func (d *fakeDriver) Device() string { return "fake GPU" }
func (d *fakeDriver) Close() error   { return nil }

type fakeBuf struct {
	d        *fakeDriver
	b        []byte
	released bool
}

func (b *fakeBuf) Bytes() []byte {
	if b.released {
		panic("fake: Bytes of a released buffer")
	}
	return b.b
}
func (b *fakeBuf) Size() int { return len(b.b) }
func (b *fakeBuf) Release() {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	if b.released {
		panic("fake: buffer released twice")
	}
	for _, cb := range b.d.cbs {
		if cb.committed && !cb.completed {
			for _, ds := range cb.dispatches {
				for _, a := range ds.Args {
					if a.Buf == driver.Buffer(b) {
						panic("fake: buffer released while an in-flight command buffer uses it")
					}
				}
			}
		}
	}
	b.released = true
}

func (d *fakeDriver) NewBuffer(size int) (driver.Buffer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := &fakeBuf{d: d, b: make([]byte, size)}
	d.bufs = append(d.bufs, b)
	return b, nil
}

type fakePipe struct{ key driver.PipelineKey }

func (p fakePipe) Key() driver.PipelineKey { return p.key }
func (p fakePipe) MaxThreads() int         { return 1024 }
func (p fakePipe) SIMDWidth() int          { return 32 }

func (d *fakeDriver) Pipeline(key driver.PipelineKey) (driver.Pipeline, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.compiles[key.String()]++
	if key.Kernel == "broken" {
		return nil, errors.New("broken.metal:3:5: error: use of undeclared identifier 'x'")
	}
	return fakePipe{key}, nil
}

type fakeCB struct {
	d          *fakeDriver
	dispatches []driver.Dispatch
	committed  bool
	completed  bool
	waits      int
	err        error
}

func (d *fakeDriver) NewCommandBuffer() driver.CommandBuffer {
	d.mu.Lock()
	defer d.mu.Unlock()
	cb := &fakeCB{d: d}
	if d.keepless {
		kept := d.cbs[:0]
		for _, c := range d.cbs {
			if !c.completed {
				kept = append(kept, c)
			}
		}
		clear(d.cbs[len(kept):])
		d.cbs = kept
	}
	d.cbs = append(d.cbs, cb)
	return cb
}

func (c *fakeCB) Encode(ds driver.Dispatch) {
	if c.committed {
		panic("fake: Encode after Commit")
	}
	for _, a := range ds.Args {
		if a.Buf != nil && a.Buf.(*fakeBuf).released {
			panic("fake: dispatch binds a released buffer")
		}
	}
	ds.Args = append([]driver.Arg(nil), ds.Args...)
	c.dispatches = append(c.dispatches, ds)
}

func (c *fakeCB) Commit() {
	if c.committed {
		panic("fake: Commit twice")
	}
	c.committed = true
	if !c.d.holdCompletion {
		c.complete()
	}
}

// complete runs the command buffer's dispatches (the toy kernels) once.
func (c *fakeCB) complete() {
	if !c.committed {
		panic("fake: completing an uncommitted command buffer")
	}
	if c.completed {
		return
	}
	c.completed = true
	for _, ds := range c.dispatches {
		switch ds.Pipeline.Key().Kernel {
		case "copy_bytes": // args: dst, src, n (uint32 bytes)
			n := int(binary.LittleEndian.Uint32(ds.Args[2].Bytes))
			dst, src := ds.Args[0], ds.Args[1]
			copy(dst.Buf.Bytes()[dst.Offset:dst.Offset+n], src.Buf.Bytes()[src.Offset:src.Offset+n])
		case "fill_u32": // args: dst, n (uint32 elements), v (uint32)
			n := int(binary.LittleEndian.Uint32(ds.Args[1].Bytes))
			v := binary.LittleEndian.Uint32(ds.Args[2].Bytes)
			dst := ds.Args[0]
			for i := range n {
				binary.LittleEndian.PutUint32(dst.Buf.Bytes()[dst.Offset+4*i:], v)
			}
		case "fault":
			if c.err == nil {
				c.err = errors.New("GPU fault: Invalid device load executing kernel function")
			}
		}
	}
}

func (c *fakeCB) Wait() error {
	if !c.committed {
		panic("fake: Wait before Commit")
	}
	c.waits++
	c.complete()
	return c.err
}

func (c *fakeCB) Done() bool { return c.completed }

func (c *fakeCB) GPUTime() time.Duration {
	if !c.completed {
		panic("fake: GPUTime before completion")
	}
	return time.Duration(len(c.dispatches)) * c.d.perKernel
}

// completeAll completes every committed command buffer, as the GPU would
// in its own time.
func (d *fakeDriver) completeAll() {
	d.mu.Lock()
	cbs := append([]*fakeCB(nil), d.cbs...)
	d.mu.Unlock()
	for _, cb := range cbs {
		if cb.committed {
			cb.complete()
		}
	}
}

// committed counts committed command buffers, and the total Waits.
func (d *fakeDriver) counts() (committed, waits, dispatches int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, cb := range d.cbs {
		if cb.committed {
			committed++
		}
		waits += cb.waits
		dispatches += len(cb.dispatches)
	}
	return
}

func (d *fakeDriver) String() string {
	c, w, n := d.counts()
	return fmt.Sprintf("fake: %d command buffers committed, %d waits, %d dispatches", c, w, n)
}
