//go:build darwin && arm64

package metal

// The Metal driver: Metal.framework called through purego's Objective-C
// runtime, no cgo.
//
// Calls on the dispatch path (encoding, commit, status) go through
// objc_msgSend with purego.SyscallN and integer/pointer arguments only: no
// reflection (SyscallN's variadic arguments still escape: a couple of
// small allocations a call). MTLSize (24 bytes) is passed as a pointer to
// a copy, which is how the arm64 procedure call standard passes a
// composite larger than 16 bytes; the copies live in the heap-allocated
// command buffer, which the Go collector never moves. This file therefore
// serves darwin/arm64 only; openMetal refuses other architectures.
//
// Ownership follows Cocoa's rules: objects from new…/alloc/copy are
// retained and released here; autoreleased ones (command buffers,
// encoders, strings, errors) are retained where they must outlive the
// autorelease pool that every call creating them runs in
// (objc_autoreleasePoolPush/Pop with the goroutine locked to its thread).
// Encoding runs in a pool too, in case a call autoreleases (Metal's debug
// layers may); make test-metal sets OBJC_DEBUG_MISSING_POOLS=YES.

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"

	"github.com/forgeml/forge/metal/driver"
)

// mslVersion is the Metal Shading Language version the kernels are
// written for: MTLLanguageVersion3_1 (macOS 14). The files that use Metal
// 4's tensor operations (kernels/matmul2d.metal: they include
// <metal_tensor>) compile as MSL 4.0 instead — MTLLanguageVersion4_0 =
// (4 << 16) + 0, API_AVAILABLE(macos(26.0)) in the macOS 26 SDK's
// MTLLibrary.h — and only on a device that runs them (TensorOps).
const (
	mslVersion      = 3<<16 | 1
	mslVersionName  = "3.1"
	mslMinMacOS     = 14
	msl4Version     = 4 << 16
	msl4VersionName = "4.0"
	mtlStorageShare = 0 // MTLResourceStorageModeShared

	// MTLGPUFamily values (MTLDevice.h, macOS 26 SDK): Metal 4 — the GPUs
	// that run MSL 4.0 and its tensor ops — and Apple10, whose GPU cores
	// have neural accelerators for them (M5, A19).
	mtlGPUFamilyMetal4  = 5002
	mtlGPUFamilyApple10 = 1010

	cbStatusCompleted = 4 // MTLCommandBufferStatusCompleted
	cbStatusError     = 5 // MTLCommandBufferStatusError

	nsUTF8 = 4 // NSUTF8StringEncoding
)

// MTLDataType values of the function constant types.
var constDataType = map[driver.ConstType]uintptr{
	driver.Float32: 3,  // MTLDataTypeFloat
	driver.Int32:   29, // MTLDataTypeInt
	driver.UInt32:  33, // MTLDataTypeUInt
	driver.Bool:    53, // MTLDataTypeBool
}

// objc runtime entry points and Metal functions, resolved once.
var rt struct {
	once    sync.Once
	err     error
	msgSend uintptr

	poolPush, poolPop uintptr
	createDevice      uintptr
	copyAllDevices    uintptr

	msgSendF64 func(id objc.ID, sel objc.SEL) float64
}

// Selectors, registered once.
var sel struct {
	alloc, init, release, retain, respondsTo                         objc.SEL
	name, utf8, localizedDescription, initWithBytes, count, objectAt objc.SEL
	processInfo, atLeastVersion, supportsFamily                      objc.SEL
	newQueue, newBuffer, newBufferNoCopy, contents                   objc.SEL
	setLanguageVersion, languageVersion, setMathMode, setFastMath    objc.SEL
	setMathFunctions                                                 objc.SEL
	newLibrary, newFunction, setConstant, newPipeline                objc.SEL
	maxThreads, execWidth                                            objc.SEL
	commandBuffer, computeEncoder, setPipeline, setBuffer, setBytes  objc.SEL
	dispatchGroups, endEncoding, commit, waitUntilCompleted, status  objc.SEL
	errorSel, gpuStart, gpuEnd                                       objc.SEL
	encoderWithType, memoryBarrier                                   objc.SEL
}

// loadRuntime resolves the runtime and Metal symbols.
func loadRuntime() error {
	rt.once.Do(func() { rt.err = resolveRuntime() })
	return rt.err
}

func resolveRuntime() error {
	libobjc, err := purego.Dlopen("/usr/lib/libobjc.A.dylib", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("loading libobjc: %w", err)
	}
	for _, s := range []struct {
		p    *uintptr
		name string
	}{{&rt.msgSend, "objc_msgSend"}, {&rt.poolPush, "objc_autoreleasePoolPush"}, {&rt.poolPop, "objc_autoreleasePoolPop"}} {
		if *s.p, err = purego.Dlsym(libobjc, s.name); err != nil {
			return fmt.Errorf("libobjc: %w", err)
		}
	}
	// Some macOS versions return no default device to a process that
	// has not loaded CoreGraphics; load it first (best effort).
	purego.Dlopen("/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	mtl, err := purego.Dlopen("/System/Library/Frameworks/Metal.framework/Metal", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("loading Metal.framework: %w", err)
	}
	if rt.createDevice, err = purego.Dlsym(mtl, "MTLCreateSystemDefaultDevice"); err != nil {
		return fmt.Errorf("Metal.framework: %w", err)
	}
	rt.copyAllDevices, _ = purego.Dlsym(mtl, "MTLCopyAllDevices")
	purego.RegisterFunc(&rt.msgSendF64, rt.msgSend)

	r := objc.RegisterName
	sel.alloc, sel.init, sel.release, sel.retain = r("alloc"), r("init"), r("release"), r("retain")
	sel.respondsTo = r("respondsToSelector:")
	sel.name, sel.utf8, sel.localizedDescription = r("name"), r("UTF8String"), r("localizedDescription")
	sel.initWithBytes = r("initWithBytes:length:encoding:")
	sel.count, sel.objectAt = r("count"), r("objectAtIndex:")
	sel.processInfo, sel.atLeastVersion = r("processInfo"), r("isOperatingSystemAtLeastVersion:")
	sel.supportsFamily = r("supportsFamily:")
	sel.newQueue, sel.newBuffer, sel.contents = r("newCommandQueue"), r("newBufferWithLength:options:"), r("contents")
	sel.newBufferNoCopy = r("newBufferWithBytesNoCopy:length:options:deallocator:")
	sel.setLanguageVersion, sel.languageVersion = r("setLanguageVersion:"), r("languageVersion")
	sel.setMathMode, sel.setFastMath = r("setMathMode:"), r("setFastMathEnabled:")
	sel.setMathFunctions = r("setMathFloatingPointFunctions:")
	sel.newLibrary = r("newLibraryWithSource:options:error:")
	sel.newFunction = r("newFunctionWithName:constantValues:error:")
	sel.setConstant = r("setConstantValue:type:atIndex:")
	sel.newPipeline = r("newComputePipelineStateWithFunction:error:")
	sel.maxThreads, sel.execWidth = r("maxTotalThreadsPerThreadgroup"), r("threadExecutionWidth")
	sel.commandBuffer, sel.computeEncoder = r("commandBuffer"), r("computeCommandEncoder")
	sel.setPipeline, sel.setBuffer, sel.setBytes = r("setComputePipelineState:"), r("setBuffer:offset:atIndex:"), r("setBytes:length:atIndex:")
	sel.dispatchGroups = r("dispatchThreadgroups:threadsPerThreadgroup:")
	sel.endEncoding, sel.commit, sel.waitUntilCompleted = r("endEncoding"), r("commit"), r("waitUntilCompleted")
	sel.status, sel.errorSel = r("status"), r("error")
	sel.gpuStart, sel.gpuEnd = r("GPUStartTime"), r("GPUEndTime")
	sel.encoderWithType, sel.memoryBarrier = r("computeCommandEncoderWithDispatchType:"), r("memoryBarrierWithScope:")
	return nil
}

// msg sends sel to id with integer or pointer arguments and returns the
// integer or pointer result. As for purego.SyscallN, a Go pointer passed
// as uintptr(unsafe.Pointer(p)) in the call expression is moved to the
// heap and kept alive until the call returns (go:uintptrescapes), so a
// stack copy cannot leave Objective-C a stale address.
//
//go:uintptrescapes
func msg(id objc.ID, s objc.SEL, args ...uintptr) uintptr {
	f, o, a := rt.msgSend, uintptr(id), uintptr(s)
	var r uintptr
	switch len(args) {
	case 0:
		r, _, _ = purego.SyscallN(f, o, a)
	case 1:
		r, _, _ = purego.SyscallN(f, o, a, args[0])
	case 2:
		r, _, _ = purego.SyscallN(f, o, a, args[0], args[1])
	case 3:
		r, _, _ = purego.SyscallN(f, o, a, args[0], args[1], args[2])
	case 4:
		r, _, _ = purego.SyscallN(f, o, a, args[0], args[1], args[2], args[3])
	default:
		panic("metal: msg: too many arguments")
	}
	return r
}

//go:uintptrescapes
func msgID(id objc.ID, s objc.SEL, args ...uintptr) objc.ID { return objc.ID(msg(id, s, args...)) }

// msgBool is for methods returning BOOL (one byte on arm64).
//
//go:uintptrescapes
func msgBool(id objc.ID, s objc.SEL, args ...uintptr) bool { return msg(id, s, args...)&0xff != 0 }

// withPool runs f inside an autorelease pool on a locked OS thread.
func withPool(f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p, _, _ := purego.SyscallN(rt.poolPush)
	defer purego.SyscallN(rt.poolPop, p)
	f()
}

// nsString returns a new (retained) NSString holding s; release it.
func nsString(s string) objc.ID {
	b := []byte(s) // heap, NUL not needed
	if len(b) == 0 {
		b = []byte{0}
	}
	str := msgID(msgID(objc.ID(objc.GetClass("NSString")), sel.alloc), sel.initWithBytes,
		uintptr(unsafe.Pointer(&b[0])), uintptr(len(s)), nsUTF8)
	runtime.KeepAlive(b)
	return str
}

// goString copies an NSString's text.
func goString(s objc.ID) string {
	if s == 0 {
		return ""
	}
	p := msg(s, sel.utf8)
	if p == 0 {
		return ""
	}
	base := cPointer(p)
	var n int
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// cPointer converts the address of memory Go does not manage (returned by
// a C or Objective-C call) to a pointer.
func cPointer(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// nsError describes an NSError (call inside withPool).
func nsError(e objc.ID) string {
	if e == 0 {
		return "unknown error"
	}
	return goString(msgID(e, sel.localizedDescription))
}

// metalDriver is the driver.Driver of a Metal device.
type metalDriver struct {
	dev, queue objc.ID
	name       string
	math       mathMode

	sources map[string]string
	index   map[string]string // kernel function → file
	libs    map[string]objc.ID
	libErrs map[string]error
	pipes   []*mtlPipeline

	archive             objc.ID // the open MTLBinaryArchive (archive_darwin.go), or 0
	archHits, archAdded int

	famOnce         sync.Once
	metal4, apple10 bool // the GPU families of the tensor ops (and macOS 26)
}

type mathMode struct {
	name      string
	mode      uintptr // MTLMathMode: 0 safe, 1 relaxed, 2 fast
	functions uintptr // MTLMathFloatingPointFunctions: 0 fast, 1 precise
}

// openMetal opens the system's default Metal device with the kernel
// sources sources (file name → MSL).
//
// FORGE_METAL_MATH selects the math mode the kernels compile with (macOS
// 15 and later; before, fast math is switched off unless "fast"): "safe"
// (the default: no reassociation, so the compensated sums of the norm,
// reduction, attention and optimizer kernels keep their error terms and
// results stay those the emulator checks), "relaxed" (Apple silicon's
// usual mode: reassociation and contraction allowed, infinities and NaNs
// honoured — compensated sums may fall back to plain float32 accuracy) or
// "fast" (assumes no infinities or NaNs: breaks the softmax, reduction and
// comparison kernels; for experiments only). Library functions (exp, log,
// …) are the precise ones except in fast mode.
func openMetal(sources map[string]string) (driver.Driver, error) {
	if runtime.GOARCH != "arm64" {
		return nil, errors.New("metal: the Metal backend needs Apple silicon (darwin/arm64); FORGE_BACKEND=metal-emu runs the same kernels on the CPU")
	}
	if err := loadRuntime(); err != nil {
		return nil, fmt.Errorf("metal: %w", err)
	}
	mm := mathMode{"safe", 0, 1}
	switch v := os.Getenv("FORGE_METAL_MATH"); v {
	case "", "safe":
	case "relaxed":
		mm = mathMode{"relaxed", 1, 1}
	case "fast":
		mm = mathMode{"fast", 2, 0}
	default:
		return nil, fmt.Errorf("metal: FORGE_METAL_MATH=%q: want safe, relaxed or fast", v)
	}
	index, err := kernelIndex(sources)
	if err != nil {
		return nil, err
	}
	d := &metalDriver{math: mm, sources: sources, index: index, libs: map[string]objc.ID{}, libErrs: map[string]error{}}
	withPool(func() {
		if !osAtLeast(mslMinMacOS) {
			err = fmt.Errorf("metal: the kernels need MSL %s, which needs macOS %d or later", mslVersionName, mslMinMacOS)
			return
		}
		r, _, _ := purego.SyscallN(rt.createDevice)
		d.dev = objc.ID(r)
		if d.dev == 0 && rt.copyAllDevices != 0 {
			all, _, _ := purego.SyscallN(rt.copyAllDevices)
			if all != 0 {
				if msg(objc.ID(all), sel.count) > 0 {
					d.dev = msgID(objc.ID(all), sel.objectAt, 0)
					msg(d.dev, sel.retain)
				}
				msg(objc.ID(all), sel.release)
			}
		}
		if d.dev == 0 {
			err = errors.New("metal: no Metal device (MTLCreateSystemDefaultDevice returned nil)")
			return
		}
		d.name = goString(msgID(d.dev, sel.name))
		d.queue = msgID(d.dev, sel.newQueue)
		if d.queue == 0 {
			err = errors.New("metal: newCommandQueue failed")
		}
	})
	if err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// osAtLeast reports whether macOS is at least major.0 (inside withPool).
func osAtLeast(major int) bool {
	v := &[3]int64{int64(major), 0, 0} // NSOperatingSystemVersion, by pointer (24 bytes)
	pi := msgID(objc.ID(objc.GetClass("NSProcessInfo")), sel.processInfo)
	ok := msgBool(pi, sel.atLeastVersion, uintptr(unsafe.Pointer(v)))
	runtime.KeepAlive(v)
	return ok
}

func (d *metalDriver) Name() string { return "metal" }

func (d *metalDriver) Device() string {
	return fmt.Sprintf("%s (MSL %s, math %s)", d.name, mslVersionName, d.math.name)
}

func (d *metalDriver) Close() error {
	for _, p := range d.pipes {
		msg(p.pso, sel.release)
		p.pso = 0 // Encode refuses a pipeline of a closed driver
	}
	d.pipes = nil
	d.closeArchive()
	for f, l := range d.libs {
		msg(l, sel.release)
		delete(d.libs, f)
	}
	if d.queue != 0 {
		msg(d.queue, sel.release)
		d.queue = 0
	}
	if d.dev != 0 {
		msg(d.dev, sel.release)
		d.dev = 0
	}
	return nil
}

// mtlBuffer is an MTLBuffer in shared storage.
type mtlBuffer struct {
	id objc.ID
	b  []byte
}

func (b *mtlBuffer) Bytes() []byte { return b.b }
func (b *mtlBuffer) Size() int     { return len(b.b) }
func (b *mtlBuffer) Release() {
	if b.id != 0 {
		msg(b.id, sel.release)
		b.id, b.b = 0, nil
	}
}

func (d *metalDriver) NewBuffer(size int) (driver.Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("metal: buffer of %d bytes", size)
	}
	var id objc.ID
	withPool(func() { id = msgID(d.dev, sel.newBuffer, uintptr(size), mtlStorageShare) })
	if id == 0 {
		return nil, fmt.Errorf("metal: newBufferWithLength:%d failed (out of device memory?)", size)
	}
	p := msg(id, sel.contents)
	if p == 0 {
		msg(id, sel.release)
		return nil, fmt.Errorf("metal: a %d-byte buffer has no contents pointer", size)
	}
	return &mtlBuffer{id: id, b: unsafe.Slice((*byte)(cPointer(p)), size)}, nil
}

// NewBufferNoCopy makes an MTLBuffer of mem itself
// (newBufferWithBytesNoCopy:length:options:deallocator:, shared storage,
// no deallocator: Release drops the MTLBuffer and leaves the memory to
// its owner). Metal requires mem to start on a host page and be a whole
// number of pages long (os.Getpagesize: 16 KiB on Apple silicon).
var _ driver.HostMemory = (*metalDriver)(nil)

func (d *metalDriver) NewBufferNoCopy(mem []byte) (driver.Buffer, error) {
	page := os.Getpagesize()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	if len(mem) == 0 || p%uintptr(page) != 0 || len(mem)%page != 0 {
		return nil, fmt.Errorf("metal: newBufferWithBytesNoCopy: %d bytes at %#x are not whole %d-byte pages", len(mem), p, page)
	}
	var id objc.ID
	withPool(func() {
		id = msgID(d.dev, sel.newBufferNoCopy, uintptr(unsafe.Pointer(unsafe.SliceData(mem))), uintptr(len(mem)), mtlStorageShare, 0)
	})
	if id == 0 {
		return nil, fmt.Errorf("metal: newBufferWithBytesNoCopy:%#x length:%d failed", p, len(mem))
	}
	return &mtlBuffer{id: id, b: mem[:len(mem):len(mem)]}, nil
}

// tensorFamilies reports (once) whether the OS is macOS 26 or later and
// the GPU is in the Metal 4 family (it runs MSL 4.0 and its tensor ops),
// and whether it is in the Apple10 family (neural accelerators in its GPU
// cores). The OS check accepts a reported 16.0 too: macOS 26 reports
// itself as 16 to some binaries built against an older SDK, and there is
// no macOS 16 to 25.
func (d *metalDriver) tensorFamilies() (metal4, apple10 bool) {
	d.famOnce.Do(func() {
		withPool(func() {
			if !osAtLeast(16) || !msgBool(d.dev, sel.respondsTo, uintptr(sel.supportsFamily)) {
				return
			}
			d.metal4 = msgBool(d.dev, sel.supportsFamily, mtlGPUFamilyMetal4)
			d.apple10 = d.metal4 && msgBool(d.dev, sel.supportsFamily, mtlGPUFamilyApple10)
		})
	})
	return d.metal4, d.apple10
}

// TensorOps implements driver.TensorOps from the GPU families alone: none
// unless tensorFamilies finds macOS 26 and a Metal 4 GPU, then accelerated
// on the Apple10 family, else supported. Nothing is compiled here: the
// tensor-op files compile (as MSL 4.0) when a product first uses them, and
// a compile failure then turns the variant off for the backend (said once
// on stderr), so a Mac whose products never take the variant — auto mode
// below Apple10 — never compiles it.
func (d *metalDriver) TensorOps() driver.TensorOpsLevel {
	metal4, apple10 := d.tensorFamilies()
	switch {
	case apple10:
		return driver.TensorOpsAccelerated
	case metal4:
		return driver.TensorOpsSupported
	}
	return driver.TensorOpsNone
}

// library returns the compiled library of a source file, compiling it on
// first use (see compileLibrary).
func (d *metalDriver) library(file string) (objc.ID, error) {
	if l, ok := d.libs[file]; ok {
		return l, nil
	}
	if err, ok := d.libErrs[file]; ok {
		return 0, err
	}
	lib, note, err := d.compileLibrary(file)
	d.keepLibrary(file, lib, note, err)
	return lib, err
}

// keepLibrary records the outcome of compileLibrary.
func (d *metalDriver) keepLibrary(file string, lib objc.ID, note string, err error) {
	if note != "" {
		d.math.name = note
	}
	if err != nil {
		d.libErrs[file] = err
		return
	}
	d.libs[file] = lib
}

// compileLibrary compiles a source file's library: as MSL 4.0 if it uses
// tensor ops (on a device that runs them), else as MSL 3.1. It changes
// nothing in d (CompileLibraries runs several at once; MTLDevice's
// methods may be called from any thread); note is the math mode's name
// when the OS cannot give the one asked for ("" otherwise).
func (d *metalDriver) compileLibrary(file string) (lib objc.ID, note string, err error) {
	version, versionName := uintptr(mslVersion), mslVersionName
	if driver.UsesTensorOps(d.sources[file]) {
		if metal4, _ := d.tensorFamilies(); !metal4 {
			return 0, "", fmt.Errorf("metal: %s uses Metal 4 tensor ops, which %s does not run (macOS 26 and a Metal 4 GPU needed)", file, d.name)
		}
		version, versionName = msl4Version, msl4VersionName
	}
	withPool(func() {
		opts := msgID(msgID(objc.ID(objc.GetClass("MTLCompileOptions")), sel.alloc), sel.init)
		defer msg(opts, sel.release)
		msg(opts, sel.setLanguageVersion, version)
		if got := msg(opts, sel.languageVersion); got != version {
			err = fmt.Errorf("metal: %s: this macOS refuses MSL %s (language version %#x, got %#x)", file, versionName, version, got)
			return
		}
		if msgBool(opts, sel.respondsTo, uintptr(sel.setMathMode)) {
			msg(opts, sel.setMathMode, d.math.mode)
			if msgBool(opts, sel.respondsTo, uintptr(sel.setMathFunctions)) {
				msg(opts, sel.setMathFunctions, d.math.functions)
			}
		} else { // before macOS 15: only fast math on or off
			fast := uintptr(0)
			if d.math.mode == 2 {
				fast = 1
			} else if d.math.mode == 1 {
				note = "safe (no relaxed mode before macOS 15)"
			}
			msg(opts, sel.setFastMath, fast)
		}
		src := nsString(d.sources[file])
		defer msg(src, sel.release)
		errp := new(objc.ID)
		lib = msgID(d.dev, sel.newLibrary, uintptr(src), uintptr(opts), uintptr(unsafe.Pointer(errp)))
		runtime.KeepAlive(errp)
		if lib == 0 {
			err = fmt.Errorf("metal: compiling %s:\n%s", file,
				strings.ReplaceAll(nsError(*errp), "program_source", file))
		}
	})
	return lib, note, err
}

// CompileLibraries implements driver.LibraryPrecompiler: it compiles every
// library not compiled yet, except the tensor-op files (they compile when
// a product first uses them), on up to GOMAXPROCS threads at once.
func (d *metalDriver) CompileLibraries(progress func(done, total int)) {
	var files []string
	for f, src := range d.sources {
		_, ok := d.libs[f]
		_, failed := d.libErrs[f]
		if !ok && !failed && !driver.UsesTensorOps(src) {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	type result struct {
		file, note string
		lib        objc.ID
		err        error
	}
	work := make(chan string)
	results := make(chan result)
	workers := min(len(files), max(2, runtime.GOMAXPROCS(0)))
	for range workers {
		go func() {
			for f := range work {
				lib, note, err := d.compileLibrary(f)
				results <- result{f, note, lib, err}
			}
		}()
	}
	go func() {
		for _, f := range files {
			work <- f
		}
		close(work)
	}()
	for i := range files {
		r := <-results
		d.keepLibrary(r.file, r.lib, r.note, r.err)
		progress(i+1, len(files))
	}
}

// CompileLibrary implements driver.LibraryCompiler: it compiles file's
// library as Pipeline would on first use (MSL 4.0 for a tensor-op file on
// a Metal 4 GPU, else MSL 3.1).
func (d *metalDriver) CompileLibrary(file string) (string, error) {
	src, ok := d.sources[file]
	if !ok {
		return "", fmt.Errorf("metal: no kernel source %q", file)
	}
	lang := "MSL " + mslVersionName
	if driver.UsesTensorOps(src) {
		lang = "MSL " + msl4VersionName
	}
	_, err := d.library(file)
	return lang, err
}

// mtlPipeline is a compute pipeline state.
type mtlPipeline struct {
	key        driver.PipelineKey
	pso        objc.ID
	maxThreads int
	simdWidth  int
}

func (p *mtlPipeline) Key() driver.PipelineKey { return p.key }
func (p *mtlPipeline) MaxThreads() int         { return p.maxThreads }
func (p *mtlPipeline) SIMDWidth() int          { return p.simdWidth }

// Pipeline compiles the specialisation named by key. The backend caches
// the result, so each key is compiled once.
func (d *metalDriver) Pipeline(key driver.PipelineKey) (driver.Pipeline, error) {
	file, ok := d.index[key.Kernel]
	if !ok {
		files := make([]string, 0, len(d.sources))
		for f := range d.sources {
			files = append(files, f)
		}
		sort.Strings(files)
		return nil, fmt.Errorf("metal: no kernel function %s in the kernel sources (%s)", key.Kernel, strings.Join(files, ", "))
	}
	lib, err := d.library(file)
	if err != nil {
		return nil, err
	}
	var p *mtlPipeline
	withPool(func() {
		cv := msgID(msgID(objc.ID(objc.GetClass("MTLFunctionConstantValues")), sel.alloc), sel.init)
		defer msg(cv, sel.release)
		vals := make([]uint32, len(key.Constants)) // heap: Metal copies the values
		for i, c := range key.Constants {
			t, ok := constDataType[c.Type]
			if !ok {
				err = fmt.Errorf("metal: %s: constant %d has unknown type %v", key, c.Index, c.Type)
				return
			}
			vals[i] = c.Bits // little-endian: a bool's byte is the first
			msg(cv, sel.setConstant, uintptr(unsafe.Pointer(&vals[i])), t, uintptr(c.Index))
		}
		runtime.KeepAlive(vals)
		name := nsString(key.Kernel)
		defer msg(name, sel.release)
		// Always through constantValues (empty when the key has none):
		// newFunctionWithName: on a kernel that declares function
		// constants gives a function no pipeline can be made from, while
		// this call names the constant that is missing.
		errp := new(objc.ID)
		fn := msgID(lib, sel.newFunction, uintptr(name), uintptr(cv), uintptr(unsafe.Pointer(errp)))
		if fn == 0 {
			desc := "no such function in the compiled library"
			if *errp != 0 {
				desc = strings.ReplaceAll(nsError(*errp), "program_source", file)
			}
			err = fmt.Errorf("metal: %s (%s): %s", key, file, desc)
			return
		}
		defer msg(fn, sel.release)
		var pso objc.ID
		if d.archive != 0 {
			var perr error
			if pso, perr = d.archivedPipeline(fn); perr != nil {
				err = fmt.Errorf("metal: %s (%s): pipeline: %v", key, file, perr)
				return
			}
		} else {
			*errp = 0
			pso = msgID(d.dev, sel.newPipeline, uintptr(fn), uintptr(unsafe.Pointer(errp)))
			runtime.KeepAlive(errp)
			if pso == 0 {
				err = fmt.Errorf("metal: %s (%s): pipeline: %s", key, file, nsError(*errp))
				return
			}
		}
		p = &mtlPipeline{key: key, pso: pso,
			maxThreads: int(msg(pso, sel.maxThreads)), simdWidth: int(msg(pso, sel.execWidth))}
	})
	if err != nil {
		return nil, err
	}
	d.pipes = append(d.pipes, p)
	return p, nil
}

// mtlCommandBuffer is a command buffer with a serial compute encoder, or a
// concurrent one inside a concurrent region (a new encoder each time the
// kind changes: ending an encoder orders what follows after it).
type mtlCommandBuffer struct {
	cb, enc objc.ID
	lastPSO objc.ID

	// MTLSize arguments of dispatchThreadgroups, passed by pointer: they
	// live here, in the heap, where the collector does not move them.
	groups, threads [3]uint64

	committed, finished bool
	concurrent          bool // the encoder is a concurrent one
	err                 error
	gpu                 time.Duration
}

func (d *metalDriver) NewCommandBuffer() driver.CommandBuffer {
	c := &mtlCommandBuffer{}
	withPool(func() {
		c.cb = msgID(d.queue, sel.commandBuffer)
		msg(c.cb, sel.retain)
		c.enc = msgID(c.cb, sel.computeEncoder)
		msg(c.enc, sel.retain)
	})
	if c.cb == 0 || c.enc == 0 {
		panic("metal: could not create a command buffer and compute encoder")
	}
	return c
}

func (c *mtlCommandBuffer) Encode(ds driver.Dispatch) {
	if c.committed {
		panic("metal: Encode after Commit")
	}
	p := ds.Pipeline.(*mtlPipeline)
	if p.pso == 0 {
		panic(fmt.Sprintf("metal: %s: pipeline %s belongs to a closed driver", ds.Label, p.key))
	}
	for i, a := range ds.Args {
		if a.Buf != nil && a.Buf.(*mtlBuffer).id == 0 {
			panic(fmt.Sprintf("metal: %s: [[buffer(%d)]] is a released buffer", ds.Label, i))
		}
	}
	withPool(func() {
		if p.pso != c.lastPSO {
			msg(c.enc, sel.setPipeline, uintptr(p.pso))
			c.lastPSO = p.pso
		}
		for i, a := range ds.Args {
			if a.Buf != nil {
				msg(c.enc, sel.setBuffer, uintptr(a.Buf.(*mtlBuffer).id), uintptr(a.Offset), uintptr(i))
			} else {
				msg(c.enc, sel.setBytes, uintptr(unsafe.Pointer(unsafe.SliceData(a.Bytes))), uintptr(len(a.Bytes)), uintptr(i))
			}
		}
		runtime.KeepAlive(ds.Args)
		for i := range 3 {
			c.groups[i], c.threads[i] = uint64(ds.Groups[i]), uint64(ds.Threads[i])
		}
		msg(c.enc, sel.dispatchGroups, uintptr(unsafe.Pointer(&c.groups)), uintptr(unsafe.Pointer(&c.threads)))
	})
	runtime.KeepAlive(c)
}

func (c *mtlCommandBuffer) Commit() {
	if c.committed {
		panic("metal: Commit twice")
	}
	c.committed = true
	withPool(func() {
		msg(c.enc, sel.endEncoding)
		msg(c.enc, sel.release)
		c.enc = 0
		msg(c.cb, sel.commit)
	})
	c.concurrent = false
}

// MTLDispatchType and MTLBarrierScope values (MTLCommandBuffer.h,
// MTLCommandEncoder.h).
const (
	dispatchSerial     = 0
	dispatchConcurrent = 1
	barrierBuffers     = 1
)

var _ driver.ConcurrentCommandBuffer = (*mtlCommandBuffer)(nil)

// switchEncoder ends the current encoder and starts one of kind t.
func (c *mtlCommandBuffer) switchEncoder(t uintptr) {
	withPool(func() {
		msg(c.enc, sel.endEncoding)
		msg(c.enc, sel.release)
		c.enc = msgID(c.cb, sel.encoderWithType, t)
		msg(c.enc, sel.retain)
	})
	if c.enc == 0 {
		panic("metal: could not create a compute encoder")
	}
	c.lastPSO = 0 // the pipeline state is the encoder's
}

func (c *mtlCommandBuffer) BeginConcurrent() {
	if c.committed || c.concurrent {
		panic("metal: BeginConcurrent after Commit or inside a concurrent region")
	}
	c.switchEncoder(dispatchConcurrent)
	c.concurrent = true
}

func (c *mtlCommandBuffer) Barrier() {
	if !c.concurrent {
		panic("metal: Barrier outside a concurrent region")
	}
	withPool(func() { msg(c.enc, sel.memoryBarrier, barrierBuffers) })
}

func (c *mtlCommandBuffer) EndConcurrent() {
	if !c.concurrent {
		panic("metal: EndConcurrent outside a concurrent region")
	}
	c.switchEncoder(dispatchSerial)
	c.concurrent = false
}

func (c *mtlCommandBuffer) Wait() error {
	if !c.committed {
		panic("metal: Wait before Commit")
	}
	if !c.finished {
		withPool(func() {
			msg(c.cb, sel.waitUntilCompleted)
			c.finish()
		})
	}
	return c.err
}

func (c *mtlCommandBuffer) Done() bool {
	if c.finished {
		return true
	}
	if !c.committed {
		return false
	}
	return msg(c.cb, sel.status) >= cbStatusCompleted
}

// finish records the completed command buffer's status, error and GPU
// time, and releases it (inside withPool).
func (c *mtlCommandBuffer) finish() {
	c.finished = true
	st := msg(c.cb, sel.status)
	if st != cbStatusCompleted {
		desc := "no error description"
		if e := msgID(c.cb, sel.errorSel); e != 0 {
			desc = nsError(e)
		}
		if st == cbStatusError {
			c.err = errors.New(desc)
		} else {
			c.err = fmt.Errorf("command buffer ended in status %d: %s", st, desc)
		}
	}
	start, end := rt.msgSendF64(c.cb, sel.gpuStart), rt.msgSendF64(c.cb, sel.gpuEnd)
	if end > start {
		c.gpu = time.Duration((end - start) * float64(time.Second))
	}
	msg(c.cb, sel.release)
	c.cb = 0
}

func (c *mtlCommandBuffer) GPUTime() time.Duration { return c.gpu }
