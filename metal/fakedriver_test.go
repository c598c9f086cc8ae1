package metal

// A recording driver: it keeps every dispatch, lets the test decide when a
// committed command buffer completes, and runs a few toy kernels on the
// host when (and only when) a command buffer completes, as a GPU would, so
// that ordering mistakes of the runtime change the results.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

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

// NewBufferNoCopy wraps mem (driver.HostMemory), as strict as Apple
// silicon: whole driver.PageSize pages.
func (d *fakeDriver) NewBufferNoCopy(mem []byte) (driver.Buffer, error) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	if len(mem) == 0 || p%driver.PageSize != 0 || len(mem)%driver.PageSize != 0 {
		return nil, fmt.Errorf("fake: NewBufferNoCopy: %d bytes at %#x are not whole pages", len(mem), p)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b := &fakeBuf{d: d, b: mem}
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
	// group[i]: dispatches[i]'s stretch of a concurrent region between
	// barriers, numbered from 1 in the command buffer; 0 outside one.
	group     []int
	inRegion  bool
	groups    int
	committed bool
	completed bool
	waits     int
	err       error
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
	g := 0
	if c.inRegion {
		g = c.groups
	}
	c.group = append(c.group, g)
}

func (c *fakeCB) BeginConcurrent() {
	if c.committed || c.inRegion {
		panic("fake: BeginConcurrent after Commit or inside a region")
	}
	c.inRegion = true
	c.groups++
}

func (c *fakeCB) Barrier() {
	if !c.inRegion {
		panic("fake: Barrier outside a region")
	}
	c.groups++
}

func (c *fakeCB) EndConcurrent() {
	if !c.inRegion {
		panic("fake: EndConcurrent outside a region")
	}
	c.inRegion = false
}

func (c *fakeCB) Commit() {
	if c.committed {
		panic("fake: Commit twice")
	}
	c.committed = true
	c.inRegion = false
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

// archFake is the recording driver with a pipeline archive
// (driver.PipelineArchive) and ahead-of-time library compiles
// (driver.LibraryPrecompiler). Its archive file is a text file: a magic line,
// the identity, then one pipeline key a line. Pipeline counts a compile
// (fakeDriver.compiles) only for a key the open archive lacks.
type archFake struct {
	*fakeDriver
	identity string
	libFiles int           // libraries CompileLibraries compiles
	libTime  time.Duration // the clock advance per library (see tick)
	tick     func(time.Duration)

	arch        map[string]bool // the open archive's keys; nil: none open
	hits, added int
	opened      []string // OpenArchive paths
	saved       []string // SaveArchive paths
	libCompiles int
}

const fakeArchiveMagic = "forge fake pipeline archive"

func newArchFake(identity string) *archFake {
	return &archFake{fakeDriver: newFakeDriver(), identity: identity, libFiles: 13}
}

func (d *archFake) ArchiveIdentity() string { return d.identity }

func (d *archFake) OpenArchive(path string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.opened = append(d.opened, path)
	d.arch, d.hits, d.added = nil, 0, 0
	keys := map[string]bool{}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(lines) < 2 || lines[0] != fakeArchiveMagic {
			return errors.New("not a pipeline archive")
		}
		if lines[1] != d.identity {
			return fmt.Errorf("archive of %q, not %q", lines[1], d.identity)
		}
		for _, k := range lines[2:] {
			keys[k] = true
		}
	}
	d.arch = keys
	return nil
}

func (d *archFake) SaveArchive(path string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.arch == nil {
		return errors.New("no archive open")
	}
	d.saved = append(d.saved, path)
	keys := make([]string, 0, len(d.arch))
	for k := range d.arch {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	text := fakeArchiveMagic + "\n" + d.identity + "\n" + strings.Join(keys, "\n") + "\n"
	return os.WriteFile(path, []byte(text), 0o644)
}

func (d *archFake) ArchiveCounts() (hits, added int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hits, d.added
}

func (d *archFake) Pipeline(key driver.PipelineKey) (driver.Pipeline, error) {
	d.mu.Lock()
	if d.arch != nil && d.arch[key.String()] {
		d.hits++
		d.mu.Unlock()
		return fakePipe{key}, nil
	}
	d.mu.Unlock()
	p, err := d.fakeDriver.Pipeline(key)
	if err == nil {
		d.mu.Lock()
		if d.arch != nil {
			d.arch[key.String()] = true
			d.added++
		}
		d.mu.Unlock()
	}
	return p, err
}

func (d *archFake) CompileLibraries(progress func(done, total int)) {
	for i := range d.libFiles {
		d.libCompiles++
		if d.tick != nil {
			d.tick(d.libTime)
		}
		progress(i+1, d.libFiles)
	}
}

// compiled is the total of Pipeline compiles.
func (d *fakeDriver) compiled() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.compiles {
		n += c
	}
	return n
}
