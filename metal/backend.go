// Package metal is Forge's Metal backend: the Go side of kernel dispatch
// (which kernel, grid and threadgroup sizes, buffer bindings), the buffer
// pool, the pipeline cache and the command stream. It talks to whatever
// runs the kernels through the narrow seam of package metal/driver: the GPU
// through Metal.framework (darwin only, purego, no cgo) or the emulator of
// package metal/emu, which runs the same MSL sources on the CPU.
//
// Importing the package registers two backends: "metal" (the GPU; it opens
// only on macOS on Apple silicon) and "metal-emu" (the emulator; it runs
// everywhere clang is installed).
//
// # Stream
//
// Kernels are encoded into one current command buffer; nothing runs until
// that buffer is committed. Sync commits it and waits for it: one
// submission, one wait. Read synchronises only when the buffer it reads is
// used by a command buffer that has not completed (then it is a Sync);
// reading a buffer no queued kernel touches needs no wait.
//
// Flush (Backend.Flush) commits the current command buffer without
// waiting: the trainer calls it between the micro-batches of a
// gradient-accumulation step, so the GPU starts on one while the next is
// encoded and its memory is recycled as soon as it completes; the step
// still waits once. With global-norm clipping computed on the device
// (backend.KernelGradClip, ops_optim.go), a training step needs no other
// submission: one command buffer (per micro-batch) and one wait at the
// loss read.
//
// Write follows the same rule: the host writes shared memory directly, so a
// Write to a buffer that a pending (encoded, not yet committed) or in-flight
// command buffer uses syncs first — the kernels queued before the Write see
// the old contents, as program order says. A Write to a buffer no queued
// kernel uses (in particular a fresh one: the pool hands out memory only
// after every command buffer that used it completed) costs no sync, so
// uploading a new batch does not break a step's single submission.
//
// A failed command buffer (a GPU fault, an emulated kernel's crash) panics
// at the wait with a message naming its kernels. In profile mode (see
// TimeKernels) every kernel runs in a command buffer of its own and is
// waited for, and its device time is reported.
//
// # Memory
//
// Buffers are 256-byte-aligned sub-allocations of driver buffers, pooled
// by size class (pool.go). A buffer is freed by Free or, when its Buffer
// becomes unreachable, by a GC cleanup; its memory is handed out again only
// after every command buffer that used it has completed.
//
// AliasHost makes a buffer of host memory used in place (a model file
// mapped read-only: driver.HostMemory, newBufferWithBytesNoCopy on the
// GPU), whole 16 KiB pages (driver.PageSize). It is none of the pool's:
// freed or collected, its driver buffer is released (and the owner's keep
// dropped, so the owner may unmap) once every command buffer that used it
// has completed, and its memory is never handed out again. It is
// read-only: a Write to it panics (package forge refuses kernels that
// write it). PoolStats counts it as Mapped, outside Live and Bytes.
//
// # Compiling
//
// Before its first pipeline the backend asks the driver to compile every
// kernel library at once (driver.LibraryPrecompiler: the Metal driver runs
// them in parallel; the emulator has compiled its one program at Open)
// and reports progress through backend.ReportCompile (forge.OnCompile)
// once that has taken over a second. Compiled pipelines are kept across
// processes in a pipeline archive (driver.PipelineArchive: an
// MTLBinaryArchive) under the user cache directory, named by the hash of
// the kernel sources and the driver's GPU, OS and compile options
// (compilecache.go). The archive and the parallel compile are checked by
// cross-compilation and by the recording driver only: neither has run on
// Apple hardware.
//
// # Environment
//
//   - FORGE_METAL_POOL_MB: the pool's soft budget of device memory
//     (default 4096); reaching it syncs, trims and collects before growing.
//   - FORGE_METAL_POOL_POISON=1: fill every buffer Alloc hands out with
//     0xff bytes (NaN as float32, -1 as int32), to catch kernels that read
//     what they did not write.
//   - FORGE_METAL_MATH: the math mode kernels compile with on the GPU
//     (relaxed, safe or fast; driver_darwin.go).
//   - FORGE_METAL_CACHE: the pipeline archive's directory (default
//     os.UserCacheDir()/forge/metal), or "off" for none.
//   - FORGE_METAL_GPU_CORES: the GPU's core count split-K products are
//     sized by (default: the driver's, from the chip's name; ops_matmul.go).
//   - FORGE_METAL_ELEMENTWISE=scalar: keep Binary, Unary and UnaryGrad on
//     their scalar loops (no 4-element vector loads on aligned operands;
//     ops_elementwise.go).
package metal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/metal/driver"
)

// Backend is a Metal device (or its emulation) seen through a driver.
// Its methods may be called from several goroutines; they are serialised.
type Backend struct {
	backend.Unimplemented

	drv driver.Driver

	mu sync.Mutex // guards everything below (and every driver call)

	pool      pool
	stream    stream
	pipes     map[string]pipeEntry // by PipelineKey.String()
	fastPipes map[fastKey]pipeEntry
	compile   compileState // compiling ahead and the pipeline cache

	// rel receives buffers whose Buffer became unreachable (GC cleanups run
	// on their own goroutine and must never wait for mu).
	relMu    sync.Mutex
	released []*block

	dummy *block // bound for views with a nil Buf (optional operands)

	// m2Failed is the error that turned the matmul2d variant off (its
	// pipeline did not compile or cannot run 128-thread groups), said once
	// on stderr; nil while it is on.
	m2Failed atomic.Pointer[error]
}

// New returns a backend that runs kernels through drv. Its name is
// drv.Name().
func New(drv driver.Driver) *Backend {
	b := &Backend{drv: drv, pipes: map[string]pipeEntry{}, fastPipes: map[fastKey]pipeEntry{}}
	b.BackendName = drv.Name()
	b.pool.init(drv)
	b.stream.init()
	b.compile.init(nil)
	return b
}

// Name is the registry name: "metal" or "metal-emu".
func (b *Backend) Name() string { return b.drv.Name() }

// Device describes the device, e.g. "Apple M3 Max".
func (b *Backend) Device() string { return b.drv.Device() }

// Describe is the device (forge's Device.Describe): "Apple M3 Max (MSL
// 3.1, math safe)", "metal-emu (clang 19.1.7, 2 threads)".
func (b *Backend) Describe() string { return b.drv.Device() }

// Driver returns the driver the backend runs kernels through.
func (b *Backend) Driver() driver.Driver { return b.drv }

// Buffer is a sub-allocation of a driver buffer holding Len elements of
// one dtype.
type Buffer struct {
	dt      backend.DType
	n       int
	blk     *block // nil after Free
	cleanup runtime.Cleanup
}

// Len is the number of elements.
func (x *Buffer) Len() int { return x.n }

// DType is the element type.
func (x *Buffer) DType() backend.DType { return x.dt }

// errFloat64 is the panic message for float64 on Metal.
func errFloat64(op string) string {
	return fmt.Sprintf("metal: %s: float64 is not supported: Metal GPUs have no float64; "+
		"use the cpu device (FORGE_BACKEND=cpu) for float64 (gradient checks)", op)
}

// checkDType panics unless dt is one the backend stores.
func checkDType(op string, dt backend.DType) {
	if msg := dtypeProblem(op, dt); msg != "" {
		panic(msg)
	}
}

// dtypeProblem says why the backend does not store dt ("" if it does).
func dtypeProblem(op string, dt backend.DType) string {
	switch dt {
	case backend.Float32, backend.Int32, backend.Float16, backend.BFloat16:
		return ""
	case backend.Float64:
		return errFloat64(op)
	}
	return fmt.Sprintf("metal: %s: unsupported dtype %v", op, dt)
}

// Alloc returns a buffer of n elements of dt. Its contents are
// unspecified (zeros when new, stale values when recycled; NaN bytes with
// FORGE_METAL_POOL_POISON=1).
func (b *Backend) Alloc(dt backend.DType, n int) backend.Buffer {
	checkDType("alloc", dt)
	if n < 0 {
		panic(fmt.Sprintf("metal: alloc: negative length %d", n))
	}
	size := max(n*dt.Size(), 1)
	b.mu.Lock()
	blk := b.allocLocked(size)
	x := &Buffer{dt: dt, n: n, blk: blk}
	x.cleanup = runtime.AddCleanup(x, b.releaseFromGC, blk)
	b.mu.Unlock()
	return x
}

// AliasHost returns a read-only buffer of dt whose memory is mem itself
// (backend.Backend.AliasHost): the driver's buffer spans mem to the end
// of its last driver.PageSize page, which cap(mem) must reach; mem must
// start on such a page. An error says why mem cannot be used in place.
func (b *Backend) AliasHost(dt backend.DType, mem []byte, keep any) (backend.Buffer, error) {
	if msg := dtypeProblem("alias", dt); msg != "" {
		return nil, errors.New(msg)
	}
	hm, ok := b.drv.(driver.HostMemory)
	if !ok {
		return nil, fmt.Errorf("metal: alias: %s: %w", b.drv.Name(), backend.ErrNoAlias)
	}
	if len(mem) == 0 || len(mem)%dt.Size() != 0 {
		return nil, fmt.Errorf("metal: alias: %d bytes are not a whole number of %v elements", len(mem), dt)
	}
	n := roundUp(len(mem), driver.PageSize)
	if cap(mem) < n {
		return nil, fmt.Errorf("metal: alias: %d bytes (capacity %d) are not whole pages: the memory must reach the end of its last %d-byte page", len(mem), cap(mem), driver.PageSize)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	buf, err := hm.NewBufferNoCopy(mem[:n])
	if err != nil {
		return nil, fmt.Errorf("metal: alias: %w", err)
	}
	blk := &block{slab: &slab{buf: buf, mapped: true, keep: keep}, size: n}
	b.pool.st.Mapped += int64(n)
	x := &Buffer{dt: dt, n: len(mem) / dt.Size(), blk: blk}
	x.cleanup = runtime.AddCleanup(x, b.releaseFromGC, blk)
	return x, nil
}

// releaseFromGC runs on the cleanup goroutine when a Buffer became
// unreachable: it only queues the block; the owner recycles it.
func (b *Backend) releaseFromGC(blk *block) {
	b.relMu.Lock()
	b.released = append(b.released, blk)
	b.relMu.Unlock()
}

// drainReleased hands the blocks queued by GC cleanups to the pool.
// Called with mu held.
func (b *Backend) drainReleased() {
	b.relMu.Lock()
	rel := b.released
	b.released = nil
	b.relMu.Unlock()
	for i, blk := range rel {
		b.pool.release(blk, b.stream.done, b.stream.open())
		rel[i] = nil
	}
}

// Free returns buf's memory to the pool; it is reused once every command
// buffer that used it has completed (a buffer of AliasHost is released
// then instead). buf must not be used afterwards. Freeing twice is a
// no-op.
func (b *Backend) Free(buf backend.Buffer) {
	x, ok := buf.(*Buffer)
	if !ok || x == nil {
		panic(fmt.Sprintf("metal: free: not a metal buffer: %T", buf))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.freeLocked(x)
}

// freeLocked is Free of a metal buffer, with mu held.
func (b *Backend) freeLocked(x *Buffer) {
	if x.blk == nil {
		return
	}
	x.cleanup.Stop()
	blk := x.blk
	x.blk = nil
	b.pool.release(blk, b.stream.done, b.stream.open())
}

// block returns x's block, panicking if it was freed.
func (x *Buffer) block(op string) *block {
	if x.blk == nil {
		panic(fmt.Sprintf("metal: %s: buffer used after Free", op))
	}
	return x.blk
}

func asBuffer(op string, buf backend.Buffer) *Buffer {
	x, ok := buf.(*Buffer)
	if !ok || x == nil {
		panic(fmt.Sprintf("metal: %s: not a metal buffer: %T", op, buf))
	}
	return x
}

// hostBytes returns the bytes of a host slice matching dt, and how many
// elements it has.
func hostBytes(op string, dt backend.DType, host any) ([]byte, int) {
	switch h := host.(type) {
	case []float32:
		if dt != backend.Float32 {
			panic(fmt.Sprintf("metal: %s: host []float32 for a %v buffer", op, dt))
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(h))), 4*len(h)), len(h)
	case []int32:
		if dt != backend.Int32 {
			panic(fmt.Sprintf("metal: %s: host []int32 for a %v buffer", op, dt))
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(h))), 4*len(h)), len(h)
	case []uint16:
		if dt != backend.Float16 && dt != backend.BFloat16 {
			panic(fmt.Sprintf("metal: %s: host []uint16 for a %v buffer", op, dt))
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(h))), 2*len(h)), len(h)
	case []float64:
		panic(errFloat64(op))
	}
	panic(fmt.Sprintf("metal: %s: unsupported host type %T", op, host))
}

// Write copies host data ([]float32 or []int32 matching the dtype; the
// []uint16 bit patterns of a float16 or bfloat16 buffer, stored as given;
// len ≤ Len) into dst from element 0. If a queued kernel uses dst, the
// queue is synchronised first (see the package documentation). A
// buffer of AliasHost is read-only: writing it panics.
func (b *Backend) Write(dst backend.Buffer, src any) { b.hostCopy("write", dst, src, true) }

// Read copies src's first len(dst) elements into dst ([]float32 or
// []int32 matching the dtype; []uint16 bit patterns for float16 and
// bfloat16), waiting first for every queued kernel if one of them uses
// src.
func (b *Backend) Read(src backend.Buffer, dst any) { b.hostCopy("read", src, dst, false) }

// hostCopy copies between the host slice host and buf's first elements
// (into buf if write, out of it if not), synchronising first if a queued
// kernel uses buf. op ("write" or "read") names the call in panics.
func (b *Backend) hostCopy(op string, buf backend.Buffer, host any, write bool) {
	x := asBuffer(op, buf)
	h, n := hostBytes(op, x.dt, host)
	if n > x.n {
		dir := "from"
		if write {
			dir = "into"
		}
		panic(fmt.Sprintf("metal: %s: %d elements %s a buffer of %d", op, n, dir, x.n))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	blk := x.block(op)
	if write && blk.slab.mapped {
		panic("metal: " + op + ": the buffer is host memory used in place (a mapped model file) and is read-only")
	}
	if write && !blk.bound && blk.use > b.stream.done {
		// A block reused within its command buffer holds nothing of x's
		// yet, but queued kernels of its earlier life still use it: give
		// x a block no queued kernel uses instead of waiting for them.
		b.pool.release(blk, b.stream.done, b.stream.open())
		p := &b.pool
		k := p.take(blk.size)
		if k == nil {
			k = p.grow(blk.size)
		}
		blk = p.handOut(k)
		x.blk = blk
		x.cleanup.Stop()
		x.cleanup = runtime.AddCleanup(x, b.releaseFromGC, blk)
	}
	if blk.use > b.stream.done {
		b.syncLocked()
	}
	if write {
		copy(blk.bytes(), h)
	} else {
		copy(h, blk.bytes())
	}
	runtime.KeepAlive(x)
	runtime.KeepAlive(host)
}

// Sync commits the current command buffer and waits for every command
// buffer submitted so far.
func (b *Backend) Sync() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.syncLocked()
}

// kernelArg is one argument of a dispatch: the driver's binding and, for
// a buffer, the pool block it lies in, which run marks as used by the
// command buffer it encodes the dispatch into (so the memory is not
// recycled before that command buffer completes).
type kernelArg struct {
	drv driver.Arg
	blk *block // nil for bytes
	// lo, hi: the byte range of drv.Buf the view spans (to the end of its
	// block for a view without a shape), for concurrent regions.
	lo, hi int
}

// arg is the binding of view v's buffer starting at element v.Offset (byte
// offset = the sub-allocation's offset + v.Offset × element size). A view
// with a nil Buf (an absent optional operand) binds a small zeroed dummy
// buffer.
func (b *Backend) arg(v backend.View) kernelArg {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v.Buf == nil {
		if b.dummy == nil {
			b.dummy = b.allocLocked(align)
		}
		return kernelArg{driver.Arg{Buf: b.dummy.slab.buf, Offset: b.dummy.off}, b.dummy, b.dummy.off, b.dummy.off + b.dummy.size}
	}
	x := asBuffer("arg", v.Buf)
	blk := x.block("kernel argument")
	if v.Offset < 0 {
		panic(fmt.Sprintf("metal: arg: negative view offset %d", v.Offset))
	}
	off := v.Offset * x.dt.Size()
	if off > blk.size {
		panic(fmt.Sprintf("metal: arg: view offset %d beyond a buffer of %d elements", v.Offset, x.n))
	}
	lo, hi := blk.off+off, blk.off+blk.size
	if v.Shape != nil {
		hi = lo + viewSpan(v)*x.dt.Size()
	}
	return kernelArg{driver.Arg{Buf: blk.slab.buf, Offset: blk.off + off}, blk, lo, hi}
}

// viewSpan is the number of elements from v's first to its last, +1 (0
// for an empty view); a negative stride counts as its magnitude, which
// overstates the span (safe for the overlap checks that use it).
func viewSpan(v backend.View) int {
	last := 0
	for i, d := range v.Shape {
		if d == 0 {
			return 0
		}
		st := 1
		if i < len(v.Strides) {
			st = v.Strides[i]
		}
		if st < 0 {
			st = -st
		}
		last += (d - 1) * st
	}
	return last + 1
}

// maxBytesArg is the largest setBytes block Metal accepts.
const maxBytesArg = 4096

// bytesArg is a setBytes argument holding the little-endian bytes of x: a
// scalar (uint32, int32, float32, uint64, int64, uint16, int16, uint8, int8,
// bool), a fixed array of those, or a struct of such fields (and nested
// fixed arrays and structs). Fields are packed with no padding, so a struct
// mirrors an MSL struct only if its fields line up with MSL's alignment:
// add `_ uint32` fields where MSL pads (before a float2/uint2 or float4, for
// example). int, uint, float64 and pointers are refused (MSL has no double;
// int has no fixed size).
func bytesArg(x any) kernelArg {
	var buf []byte
	switch v := x.(type) {
	case uint32:
		buf = binary.LittleEndian.AppendUint32(nil, v)
	case int32:
		buf = binary.LittleEndian.AppendUint32(nil, uint32(v))
	case float32:
		buf = binary.LittleEndian.AppendUint32(nil, math.Float32bits(v))
	default:
		checkBytesType(reflect.TypeOf(x), reflect.TypeOf(x))
		var err error
		buf, err = binary.Append(nil, binary.LittleEndian, x)
		if err != nil {
			panic(fmt.Sprintf("metal: bytesArg(%T): %v", x, err))
		}
	}
	if len(buf) == 0 {
		panic(fmt.Sprintf("metal: bytesArg(%T): empty value", x))
	}
	if len(buf) > maxBytesArg {
		panic(fmt.Sprintf("metal: bytesArg(%T): %d bytes, more than setBytes's %d", x, len(buf), maxBytesArg))
	}
	return kernelArg{drv: driver.Arg{Bytes: buf}}
}

// checkBytesType panics unless t is made of fixed-size fields MSL has.
func checkBytesType(top, t reflect.Type) {
	if t == nil {
		panic("metal: bytesArg(nil)")
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int8, reflect.Uint8, reflect.Int16, reflect.Uint16,
		reflect.Int32, reflect.Uint32, reflect.Int64, reflect.Uint64, reflect.Float32:
		return
	case reflect.Array:
		checkBytesType(top, t.Elem())
		return
	case reflect.Struct:
		for i := range t.NumField() {
			checkBytesType(top, t.Field(i).Type)
		}
		return
	case reflect.Float64:
		panic(fmt.Sprintf("metal: bytesArg(%v): float64 field: MSL has no double; use float32", top))
	}
	panic(fmt.Sprintf("metal: bytesArg(%v): %v is not a fixed-size MSL type (use int32/uint32/float32)", top, t))
}

// CompileLibrary compiles one kernel source file now, through a driver
// that compiles files one by one (driver.LibraryCompiler: the GPU's), and
// returns the language it compiled as. ok is false for a driver that
// compiled every file when it opened (the emulator).
func (b *Backend) CompileLibrary(file string) (language string, ok bool, err error) {
	lc, ok := b.drv.(driver.LibraryCompiler)
	if !ok {
		return "", false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	language, err = lc.CompileLibrary(file)
	return language, true, err
}
