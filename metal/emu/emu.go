// Package emu is the Metal emulation driver: it runs Forge's .metal kernels
// on the CPU, on any Linux (or macOS) machine with clang, so the Metal
// backend can be tested without a Mac.
//
// The same MSL sources the GPU compiles are compiled by clang as C++17
// against a small shim (shim/metal_shim.h: address spaces, vector types,
// half/bfloat, math, barriers, simd_* functions, simdgroup matrices,
// atomics, function constants). A generator (parse.go, gen.go) wraps every
// .metal file in its own namespace with #line directives (compile errors
// name the .metal line), rewrites block-scope threadgroup arrays to slots
// of a per-threadgroup arena filled with 0xFF bytes (NaN) before each
// threadgroup, so stale data cannot hide a bug, and emits a launcher per
// kernel. Everything is linked with the runtime (runtime/runtime.cpp) into
// one shared library, cached by content hash under
// os.UserCacheDir()/forge/metal-emu, and loaded with purego (no cgo).
//
// # Execution model
//
// A dispatch (dispatchThreadgroups semantics) spreads its threadgroups over
// a pool of worker threads. Within a threadgroup every GPU thread is a
// fiber (64 KB stack and a guard page, an assembly context switch for
// x86-64 and arm64); fibers run one at a time in the order given by the
// Schedule, each until it reaches a rendezvous point — threadgroup_barrier,
// simdgroup_barrier, a simd_*/quad_* function, simdgroup_load/store — or
// returns.
//
//   - A barrier completes when every thread that has not returned reached
//     it. Threads waiting at different barriers end the dispatch with an
//     error naming the lines (not a hang).
//   - A simd function completes when the live lanes of the simdgroup (32
//     wide; the last one may be partial) have all stopped; the lanes at the
//     earliest call site in program order meet (they are the active lanes),
//     the others wait — so lanes in the other branch of an if, or in more
//     iterations of a loop, catch up as at a SIMT reconvergence point.
//   - simdgroup matrices hold all 64 elements in every lane (exact, since
//     MSL requires uniform control flow for them); each lane computes its
//     own multiply-accumulate. simdgroup_load and simdgroup_store happen
//     once per simdgroup at a rendezvous, as in lockstep: a load sees what
//     the lanes wrote before it and nothing they write after it.
//     thread_elements() gives a lane its two elements under Apple's lane →
//     element mapping (as in MLX's get_coord); the lanes' changes are
//     merged at the matrix's next multiply or store.
//   - Kernels of a file that mentions no rendezvous function run their
//     threads as plain calls on one fiber (about 5× faster).
//
// A missing barrier shows up as results that depend on the order threads
// run in: run tests under Forward, Reverse and Random schedules (see
// Driver.SetSchedule) and compare.
//
// # Memory and faults
//
// Buffers are anonymous mappings with a guard page before and after (the
// data is 256-byte aligned and ends less than 256 bytes before the
// trailing guard); those of NewBufferNoCopy are the caller's memory, with
// no guards. A kernel that faults — runs off a buffer, overflows its
// fiber stack, divides an integer by zero — fails its command buffer with
// an error naming the kernel, the thread and the nearest argument buffer;
// the process and the driver carry on. (The library installs a handler for
// SIGSEGV/SIGBUS/SIGFPE/SIGILL that passes faults on other threads to the
// handler installed before it, Go's; FORGE_EMU_NO_FAULT_HANDLER=1 turns it
// off.)
//
// # Address spaces
//
// device, constant and threadgroup are clang address spaces, so mixing
// them up is a compile error as with Metal. clang also rejects copying a
// struct out of such memory (`Params q = p;`), which MSL allows: a file
// whose only errors are of that kind is compiled again without address
// spaces.
//
// # Differences from Metal
//
//   - Plain memory accesses are not in lockstep across the lanes of a
//     simdgroup: code that relies on that without simdgroup_barrier gives
//     schedule-dependent results (only simd_* functions, simdgroup_barrier
//     and simdgroup_load/store are lockstep points).
//   - Floating literals without a suffix are double in C++ (MSL has no
//     double), so an expression like x * 0.1 may differ in the last bit;
//     fast:: and precise:: math are both the C library's (precise).
//   - clang's cast between vectors of the same size reinterprets the bits;
//     the generator rewrites static_cast<float4>(x) and (float4)(x) into the
//     converting constructor, but not (float4)x.
//   - boolN are small structs (comparisons of vectors give integer vectors
//     that convert to them); floatNxM matrix types, textures and
//     [[threadgroup(n)]] parameters are not provided.
//   - simdgroup_load's matrix_origin is taken in the source's coordinates
//     (x = column, y = row), the transpose applied to the 8×8 block there.
//
// # Limits
//
// Pipeline refuses what Metal refuses when it creates a pipeline:
//
//   - static threadgroup memory over 32768 bytes (MaxThreadgroupMemory,
//     maxThreadgroupMemoryLength on Apple silicon): the declarations in a
//     kernel's body, per template instantiation, laid out with 16-byte
//     alignment as the emulator's arena does (Metal's own padding is not
//     known here). Declarations in helper functions are not counted there;
//     the arena still refuses them, at the dispatch that reaches them.
//   - a function constant the kernel reads that the key does not set
//     (Metal: "compilation fails if you don't provide valid constant
//     values for all required function constants"). Read means named in
//     the kernel's body, in a non-template helper it names, or in a derived
//     constant; a constant the file tests with is_function_constant_defined
//     is optional, and one that only gates an optional buffer is not read.
//     The check is lexical: a type's member functions and function
//     templates are not followed (a specialisation need not read what the
//     template reads); a read there of an unset constant fails the
//     dispatch that makes it, naming the constant.
//
// A pipeline's MaxThreads is 1024, or the kernel's
// [[max_total_threads_per_threadgroup(N)]], or lower by Options.MaxThreads
// / KernelMaxThreads / $FORGE_EMU_MAX_THREADS — so tests can stand in for
// a GPU whose pipeline reports less (register pressure); Apple documents
// no lower bound, the emulator accepts multiples of 32 from 32. A dispatch
// of more threads than its pipeline's maximum fails its command buffer.
// None of these limits has been compared with a real GPU's.
//
// # Errors
//
// Open returns compile errors that name the .metal file and line, and
// parse errors (an unknown parameter attribute) that name file:line.
// Encode never fails; a bad dispatch (unknown pipeline, unbound argument,
// fewer bytes bound to a `constant Params&` than sizeof(Params), too many
// threads) and a kernel's runtime error are returned by Wait, naming the
// dispatch's label and kernel.
//
// # Environment
//
// FORGE_EMU_CLANG names the clang++ to use (default clang++-19, clang++ or
// the newest clang++-NN on PATH); FORGE_EMU_THREADS the number of worker
// threads (default GOMAXPROCS); FORGE_EMU_SCHEDULE is forward, reverse or
// random:SEED; FORGE_EMU_TIMEOUT (e.g. 60s) is a watchdog that fails a
// dispatch running longer (an endless loop) instead of hanging;
// FORGE_EMU_MAX_THREADS (e.g. 256, or 256,softmax_rows_f32=64) lowers
// pipelines' maximum threadgroup (see Limits). Options set explicitly take
// precedence. FORGE_EMU_NO_DIRECT=1 runs every kernel on
// fibers; FORGE_EMU_NO_FAULT_HANDLER=1 leaves fault signals alone.
package emu

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/forgeml/forge/metal/driver"
)

// Schedule is the order in which the fibers of a threadgroup run between
// rendezvous points.
type Schedule int

const (
	// ScheduleDefault takes $FORGE_EMU_SCHEDULE, else Forward.
	ScheduleDefault Schedule = iota
	// Forward runs thread 0 first, then 1, 2, ….
	Forward
	// Reverse runs the last thread first.
	Reverse
	// Random runs the threads in a fresh random order every round, from
	// Options.Seed (and the threadgroup's position, so results do not
	// depend on which worker ran the group).
	Random
)

func (s Schedule) String() string {
	switch s {
	case Forward:
		return "forward"
	case Reverse:
		return "reverse"
	case Random:
		return "random"
	}
	return "default"
}

// ParseSchedule parses "forward", "reverse", "random" or "random:SEED".
func ParseSchedule(s string) (Schedule, uint64, error) {
	name, seedText, hasSeed := strings.Cut(strings.TrimSpace(s), ":")
	var seed uint64
	if hasSeed {
		v, err := strconv.ParseUint(seedText, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("metal-emu: bad schedule seed in %q", s)
		}
		seed = v
	}
	switch strings.ToLower(name) {
	case "forward", "":
		return Forward, seed, nil
	case "reverse":
		return Reverse, seed, nil
	case "random":
		return Random, seed, nil
	}
	return 0, 0, fmt.Errorf("metal-emu: unknown schedule %q (forward, reverse or random:SEED)", s)
}

// Options configure Open. The zero value uses the environment's settings
// or the defaults.
type Options struct {
	// Threads is the number of worker threads that run threadgroups
	// (default $FORGE_EMU_THREADS, else GOMAXPROCS).
	Threads int
	// Schedule orders the threads of a threadgroup (default
	// $FORGE_EMU_SCHEDULE, else Forward); Seed seeds Random.
	Schedule Schedule
	Seed     uint64
	// CacheDir holds compiled libraries (default
	// os.UserCacheDir()/forge/metal-emu).
	CacheDir string
	// Timeout fails a dispatch that runs longer (a watchdog, as on a GPU;
	// default $FORGE_EMU_TIMEOUT, e.g. "60s", else none).
	Timeout time.Duration
	// Log, if not nil, is told when the sources are compiled (the first
	// use of a set of sources takes seconds; later opens load the cached
	// library).
	Log io.Writer
	// MaxThreads lowers the largest threadgroup of every pipeline (a real
	// pipeline's maxTotalThreadsPerThreadgroup may be below the device's
	// 1024, from register pressure), and KernelMaxThreads that of the
	// kernels it names, so tests can prove the launchers adapt. Default
	// $FORGE_EMU_MAX_THREADS: "256" for every kernel, or
	// "256,softmax_rows=64" (a bare number for all, kernel=N for one).
	// A kernel's [[max_total_threads_per_threadgroup(N)]] lowers it too.
	MaxThreads       int
	KernelMaxThreads map[string]int
}

// ParseMaxThreads parses a FORGE_EMU_MAX_THREADS setting: "256" (every
// kernel), "softmax_rows=64,norm_rows=128" (those kernels) or both
// ("256,softmax_rows=64").
func ParseMaxThreads(s string) (all int, byKernel map[string]int, err error) {
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		name, val, named := strings.Cut(f, "=")
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if !named {
			n, err = strconv.Atoi(name)
		}
		if err != nil {
			return 0, nil, fmt.Errorf("%q is not N or kernel=N", f)
		}
		if err := checkMaxThreads(n); err != nil || n == 0 {
			return 0, nil, fmt.Errorf("%q: %v", f, err)
		}
		if !named {
			all = n
			continue
		}
		if byKernel == nil {
			byKernel = map[string]int{}
		}
		byKernel[strings.TrimSpace(name)] = n
	}
	return all, byKernel, nil
}

// checkMaxThreads accepts 0 (no limit) and the multiples of the SIMD width
// up to MaxThreads. (Apple documents no lower bound for a pipeline's
// maxTotalThreadsPerThreadgroup; below one simdgroup no kernel of ours
// could run.)
func checkMaxThreads(n int) error {
	if n == 0 || n >= SIMDWidth && n <= MaxThreads && n%SIMDWidth == 0 {
		return nil
	}
	return fmt.Errorf("%d threads: want a multiple of %d from %d to %d", n, SIMDWidth, SIMDWidth, MaxThreads)
}

// MaxThreads is the device's largest threadgroup (a pipeline's may be
// smaller); SIMDWidth the simdgroup width; MaxThreadgroupMemory the
// threadgroup memory a kernel may use (maxThreadgroupMemoryLength: 32 KB
// on every Apple silicon GPU family).
const (
	MaxThreads           = 1024
	SIMDWidth            = 32
	MaxThreadgroupMemory = 32768
)

// Driver runs MSL kernels on the CPU. It implements driver.Driver.
type Driver struct {
	lib     *lib
	prog    *program
	version string
	compile compileResult

	mu       sync.Mutex
	maxAll   int            // Options.MaxThreads (0: MaxThreads)
	maxBy    map[string]int // Options.KernelMaxThreads
	threads  int
	schedule Schedule
	seed     uint64
	timeout  time.Duration
	pipes    map[string]*pipeline
	last     chan struct{} // completion of the last committed command buffer
	closed   bool

	tensorOps atomic.Int32 // the driver.TensorOpsLevel reported (TensorOps)
	gpuCores  atomic.Int32 // the core count reported (GPUCores)
}

var (
	_ driver.Driver    = (*Driver)(nil)
	_ driver.TensorOps = (*Driver)(nil)
)

// TensorOps implements driver.TensorOps. The shim implements MSL 4.0's
// tensor operations, so the emulator reports accelerated — CI runs the
// matmul2d kernels — unless FORGE_EMU_TENSOR_OPS=0 (none: the path of
// GPUs before the M5) or SetTensorOps says otherwise.
func (d *Driver) TensorOps() driver.TensorOpsLevel { return driver.TensorOpsLevel(d.tensorOps.Load()) }

// SetTensorOps sets the level TensorOps reports (tests use it to take
// either matmul path).
func (d *Driver) SetTensorOps(l driver.TensorOpsLevel) { d.tensorOps.Store(int32(l)) }

// ErrUnavailable matches (errors.Is) the errors of Open that mean the
// emulator cannot run on this machine — an unsupported platform, no clang
// — as opposed to kernels that do not compile, which are bugs: tests skip
// on the first kind only.
var ErrUnavailable = errors.New("metal-emu is not available")

// unavailable marks err as an ErrUnavailable, keeping its message.
func unavailable(err error) error { return unavailableError{err} }

type unavailableError struct{ err error }

func (e unavailableError) Error() string   { return e.err.Error() }
func (e unavailableError) Unwrap() []error { return []error{e.err, ErrUnavailable} }

// Open compiles sources (file name → MSL text; files not ending in .metal
// are headers for #include) and returns a driver that runs their kernels.
func Open(sources map[string]string, opts Options) (*Driver, error) {
	if !libAvailable {
		return nil, unavailable(errors.New("metal-emu: not available on " + runtime.GOOS + "/" + runtime.GOARCH))
	}
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil, unavailable(errors.New("metal-emu: no fiber context switch for " + runtime.GOARCH))
	}
	d := &Driver{threads: opts.Threads, schedule: opts.Schedule, seed: opts.Seed, pipes: map[string]*pipeline{}}
	if os.Getenv("FORGE_EMU_TENSOR_OPS") != "0" {
		d.SetTensorOps(driver.TensorOpsAccelerated)
	}
	if d.threads <= 0 {
		if v, err := strconv.Atoi(os.Getenv("FORGE_EMU_THREADS")); err == nil && v > 0 {
			d.threads = v
		} else {
			d.threads = runtime.GOMAXPROCS(0)
		}
	}
	if d.threads > 256 {
		d.threads = 256
	}
	d.maxAll, d.maxBy = opts.MaxThreads, opts.KernelMaxThreads
	if d.maxAll == 0 && d.maxBy == nil {
		if env := os.Getenv("FORGE_EMU_MAX_THREADS"); env != "" {
			all, by, err := ParseMaxThreads(env)
			if err != nil {
				return nil, fmt.Errorf("metal-emu: FORGE_EMU_MAX_THREADS=%q: %v", env, err)
			}
			d.maxAll, d.maxBy = all, by
		}
	}
	if err := checkMaxThreads(d.maxAll); err != nil {
		return nil, fmt.Errorf("metal-emu: Options.MaxThreads: %v", err)
	}
	for k, n := range d.maxBy {
		if err := checkMaxThreads(n); err != nil || n == 0 {
			return nil, fmt.Errorf("metal-emu: maximum threads of kernel %s: %v", k, err)
		}
	}
	d.timeout = opts.Timeout
	if d.timeout == 0 {
		if env := os.Getenv("FORGE_EMU_TIMEOUT"); env != "" {
			t, err := time.ParseDuration(env)
			if err != nil {
				return nil, fmt.Errorf("metal-emu: FORGE_EMU_TIMEOUT=%q: %v", env, err)
			}
			d.timeout = t
		}
	}
	if d.schedule == ScheduleDefault {
		d.schedule = Forward
		if env := os.Getenv("FORGE_EMU_SCHEDULE"); env != "" {
			s, seed, err := ParseSchedule(env)
			if err != nil {
				return nil, err
			}
			d.schedule = s
			if opts.Seed == 0 {
				d.seed = seed
			}
		}
	}
	prog, err := buildProgram(sources)
	if err != nil {
		return nil, fmt.Errorf("metal-emu: %w", err)
	}
	d.prog = prog
	for k := range d.maxBy {
		if _, ok := prog.byName[k]; !ok {
			return nil, fmt.Errorf("metal-emu: maximum threads set for kernel %s, which no source defines", k)
		}
	}
	_, version, err := findClang()
	if err != nil {
		return nil, unavailable(err)
	}
	d.version = clangVersionNumber(version)
	res, err := compileProgram(prog, sources, opts.CacheDir, opts.Log)
	if err != nil {
		return nil, err
	}
	d.compile = res
	l, err := loadLib(res.path)
	if err != nil {
		return nil, err
	}
	names, err := l.names()
	if err != nil {
		return nil, err
	}
	if len(names) != len(prog.kernels) {
		return nil, fmt.Errorf("metal-emu: %s has %d kernels, expected %d", res.path, len(names), len(prog.kernels))
	}
	for i, n := range names {
		if n != prog.kernels[i].Name {
			return nil, fmt.Errorf("metal-emu: %s: kernel %d is %s, expected %s", res.path, i, n, prog.kernels[i].Name)
		}
	}
	d.lib = l
	return d, nil
}

// Name is "metal-emu".
func (d *Driver) Name() string { return "metal-emu" }

// Device describes the emulator, e.g. "metal-emu (clang 19.1.7, 2 threads)".
func (d *Driver) Device() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return fmt.Sprintf("metal-emu (clang %s, %d threads)", d.version, d.threads)
}

// Kernels returns the launchable kernels, in no particular order.
func (d *Driver) Kernels() []Kernel { return append([]Kernel(nil), d.prog.kernels...) }

// SetSchedule changes the schedule of the dispatches that run from now on
// (without recompiling).
func (d *Driver) SetSchedule(s Schedule, seed uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s == ScheduleDefault {
		s = Forward
	}
	d.schedule, d.seed = s, seed
}

// SetTimeout sets the watchdog timeout of the dispatches that run from now
// on (0: none).
func (d *Driver) SetTimeout(t time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.timeout = t
}

// SetThreads changes the number of worker threads.
func (d *Driver) SetThreads(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n < 1 {
		n = 1
	}
	if n > 256 {
		n = 256
	}
	d.threads = n
}

// CompileTime is how long Open spent compiling (or finding the cached
// library), and whether the library came from the cache.
func (d *Driver) CompileTime() (time.Duration, bool) { return d.compile.duration, d.compile.cached }

// LibraryPath is the compiled library's path in the cache.
func (d *Driver) LibraryPath() string { return d.compile.path }

// SwitchCost measures the cost of one fiber context switch.
func (d *Driver) SwitchCost() time.Duration {
	return time.Duration(d.lib.switchCost(2_000_000) * float64(time.Nanosecond))
}

// Close releases the driver. The library stays loaded (other drivers may
// share it); command buffers in flight complete first.
func (d *Driver) Close() error {
	d.mu.Lock()
	last := d.last
	d.closed = true
	d.mu.Unlock()
	if last != nil {
		<-last
	}
	return nil
}

// ---- buffers -----------------------------------------------------------------

type buffer struct {
	data    []byte
	size    int
	release func()
	dead    bool
}

// NewBuffer allocates size bytes of zeroed memory, 256-byte aligned, with
// guard pages around it (see allocBuffer). The memory is not Go memory:
// keep the Buffer reachable while using its Bytes (the memory is unmapped
// by Release, or when the Buffer is garbage collected).
func (d *Driver) NewBuffer(size int) (driver.Buffer, error) {
	if size < 0 {
		return nil, fmt.Errorf("metal-emu: NewBuffer(%d): negative size", size)
	}
	data, release, err := allocBuffer(size)
	if err != nil {
		return nil, fmt.Errorf("metal-emu: NewBuffer(%d): %w", size, err)
	}
	b := &buffer{data: data, size: size, release: release}
	attachCleanup(b)
	return b, nil
}

var _ driver.HostMemory = (*Driver)(nil)

// NewBufferNoCopy returns a buffer whose memory is mem itself: no copy,
// no guard pages. As on Apple silicon, mem must start on a
// driver.PageSize boundary and be a whole number of those pages long
// (checked on every host, whatever its page size). Release forgets mem
// and never unmaps it. A kernel that writes a read-only mapping faults,
// and Wait reports it like any fault.
func (d *Driver) NewBufferNoCopy(mem []byte) (driver.Buffer, error) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	if len(mem) == 0 || p%driver.PageSize != 0 || len(mem)%driver.PageSize != 0 {
		return nil, fmt.Errorf("metal-emu: NewBufferNoCopy: %d bytes at %#x are not whole %d-byte pages", len(mem), p, driver.PageSize)
	}
	return &buffer{data: mem[:len(mem):len(mem)], size: len(mem), release: func() {}}, nil
}

func (b *buffer) Bytes() []byte { return b.data }
func (b *buffer) Size() int     { return b.size }

// Release frees the memory now (it must not be in use by a command
// buffer in flight).
func (b *buffer) Release() {
	if b.dead {
		return
	}
	b.dead = true
	b.data = nil
	b.release()
}

// base is the buffer's first byte.
func (b *buffer) base() unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b.data[:cap(b.data)])) }

// ---- pipelines -----------------------------------------------------------------

type pipeline struct {
	d      *Driver
	key    driver.PipelineKey
	id     int
	kernel Kernel
	max    int         // maxTotalThreadsPerThreadgroup
	consts []uint32    // (index, bits) pairs
	sizes  map[int]int // buffer index → sizeof the type bound by reference or value
}

// constTrue reports whether the function constant named name (declared in
// the kernel's file) is set to a non-zero value in the pipeline's key.
func (p *pipeline) constTrue(name string) bool {
	for _, f := range p.d.prog.files {
		if f.name != p.kernel.File {
			continue
		}
		for _, fc := range f.consts {
			if fc.Name != name {
				continue
			}
			for _, c := range p.key.Constants {
				if c.Index == fc.Index {
					return c.Bits != 0
				}
			}
		}
	}
	return false
}

func (p *pipeline) Key() driver.PipelineKey { return p.key }
func (p *pipeline) MaxThreads() int         { return p.max }
func (p *pipeline) SIMDWidth() int          { return SIMDWidth }

// constType maps a declared function-constant type to the seam's type.
func constType(t string) (driver.ConstType, bool) {
	switch strings.Join(strings.Fields(t), " ") {
	case "bool":
		return driver.Bool, true
	case "int", "int32_t":
		return driver.Int32, true
	case "uint", "uint32_t", "unsigned int", "unsigned":
		return driver.UInt32, true
	case "float":
		return driver.Float32, true
	}
	return 0, false
}

// Pipeline finds the kernel named by key and checks its function constants
// against the declarations in the kernel's file.
func (d *Driver) Pipeline(key driver.PipelineKey) (driver.Pipeline, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := key.String()
	if p := d.pipes[s]; p != nil {
		return p, nil
	}
	id, ok := d.prog.byName[key.Kernel]
	if !ok {
		return nil, fmt.Errorf("metal-emu: no kernel named %q", key.Kernel)
	}
	k := d.prog.kernels[id]
	var fi *fileInfo
	for _, f := range d.prog.files {
		if f.name == k.File {
			fi = f
		}
	}
	p := &pipeline{d: d, key: driver.PipelineKey{Kernel: key.Kernel, Constants: append([]driver.Constant(nil), key.Constants...)}, id: id, kernel: k}
	p.max = MaxThreads
	if k.MaxThreads > 0 {
		if k.MaxThreads > MaxThreads {
			return nil, fmt.Errorf("metal-emu: %s:%d: kernel %s declares [[max_total_threads_per_threadgroup(%d)]], more than the device's %d", k.File, k.Line, k.Name, k.MaxThreads, MaxThreads)
		}
		p.max = k.MaxThreads
	}
	if d.maxAll > 0 {
		p.max = min(p.max, d.maxAll)
	}
	if n := d.maxBy[k.Name]; n > 0 {
		p.max = min(p.max, n)
	}
	p.sizes = map[int]int{}
	for _, prm := range k.Params {
		if prm.BufferIndex >= 0 && !prm.Pointer {
			if n := d.lib.paramSize(id, prm.BufferIndex); n > 0 {
				p.sizes[prm.BufferIndex] = n
			}
		}
	}
	seen := map[int]bool{}
	for _, c := range key.Constants {
		if seen[c.Index] {
			return nil, fmt.Errorf("metal-emu: pipeline %s: function constant %d set twice", s, c.Index)
		}
		seen[c.Index] = true
		if c.Index < 0 || c.Index > 65535 {
			return nil, fmt.Errorf("metal-emu: pipeline %s: function constant index %d out of range", s, c.Index)
		}
		for _, fc := range fi.consts {
			if fc.Index != c.Index {
				continue
			}
			want, ok := constType(fc.Type)
			if !ok {
				return nil, fmt.Errorf("metal-emu: %s:%d: function constant %s has type %s; the driver sets only bool, int, uint and float", fi.name, fc.Line, fc.Name, fc.Type)
			}
			if want != c.Type {
				return nil, fmt.Errorf("metal-emu: pipeline %s: function constant %d (%s:%d %s) is %s, set as %s", s, c.Index, fi.name, fc.Line, fc.Name, want, c.Type)
			}
		}
		bits := c.Bits
		if c.Type == driver.Bool && bits != 0 {
			bits = 1
		}
		p.consts = append(p.consts, uint32(c.Index), bits)
	}
	if n := d.lib.tgBytes(id); n > MaxThreadgroupMemory {
		return nil, fmt.Errorf("metal-emu: %s:%d: kernel %s declares %d bytes of threadgroup memory, more than Metal's %d (maxThreadgroupMemoryLength)", k.File, k.Line, k.Name, n, MaxThreadgroupMemory)
	}
	for _, fc := range fi.reads[kernelFunc(k)] {
		if !seen[fc.Index] {
			return nil, fmt.Errorf("metal-emu: pipeline %s: kernel %s reads function constant %s (%s:%d, index %d), which the key does not set; Metal refuses to create such a pipeline (set it, or read it only under is_function_constant_defined)", s, k.Name, fc.Name, fi.name, fc.Line, fc.Index)
		}
	}
	d.pipes[s] = p
	return p, nil
}

// ---- command buffers ------------------------------------------------------------

type cmdBuf struct {
	d          *Driver
	dispatches []driver.Dispatch
	// group[i] is the concurrent group of dispatches[i] (concurrent.go):
	// 0 outside a concurrent region, else the number of the region's
	// stretch between barriers, counted from 1 in the command buffer.
	group     []int
	inRegion  bool
	groups    int
	committed bool
	done      chan struct{}
	err       error
	gpu       time.Duration
	stats     Stats
}

// Stats counts the scheduler's work for a command buffer.
type Stats struct {
	Rounds   int64 // scheduling rounds over all threadgroups
	Switches int64 // fiber switches
}

// NewCommandBuffer starts a command buffer.
func (d *Driver) NewCommandBuffer() driver.CommandBuffer {
	return &cmdBuf{d: d, done: make(chan struct{})}
}

func (c *cmdBuf) Encode(disp driver.Dispatch) {
	if c.committed {
		panic("metal-emu: Encode after Commit")
	}
	disp.Args = append([]driver.Arg(nil), disp.Args...)
	for i, a := range disp.Args {
		if a.Buf == nil && a.Bytes != nil {
			// Copy into 16-byte-aligned memory (a constant struct may hold
			// float4s).
			m := make([]uint64, (len(a.Bytes)+15)/8+2)
			mb := unsafe.Slice((*byte)(unsafe.Pointer(&m[0])), len(m)*8)
			off := int(-uintptr(unsafe.Pointer(&mb[0])) & 15)
			copy(mb[off:], a.Bytes)
			disp.Args[i].Bytes = mb[off : off+len(a.Bytes) : len(mb)]
		}
	}
	c.dispatches = append(c.dispatches, disp)
	g := 0
	if c.inRegion {
		g = c.groups
	}
	c.group = append(c.group, g)
}

func (c *cmdBuf) Commit() {
	if c.committed {
		panic("metal-emu: Commit twice")
	}
	c.committed = true
	c.inRegion = false
	d := c.d
	d.mu.Lock()
	order := c.order(d.schedule, d.seed)
	prev := d.last
	d.last = c.done
	d.mu.Unlock()
	go func() {
		if prev != nil {
			<-prev
		}
		start := time.Now()
		c.err = c.run(order)
		c.gpu = time.Since(start)
		close(c.done)
	}()
}

func (c *cmdBuf) Wait() error {
	if !c.committed {
		return errors.New("metal-emu: Wait on a command buffer that was not committed")
	}
	<-c.done
	return c.err
}

func (c *cmdBuf) Done() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *cmdBuf) GPUTime() time.Duration { return c.gpu }

// StatsOf returns the scheduler statistics of a completed command buffer
// of the emulator (zero for others).
func StatsOf(cb driver.CommandBuffer) Stats {
	if c, ok := cb.(*cmdBuf); ok {
		return c.stats
	}
	return Stats{}
}

func (c *cmdBuf) run(order []int) error {
	if err := c.checkRegions(); err != nil {
		return err
	}
	for _, i := range order {
		if err := c.runOne(&c.dispatches[i]); err != nil {
			name := "?"
			if p, ok := c.dispatches[i].Pipeline.(*pipeline); ok {
				name = p.key.String()
			}
			label := c.dispatches[i].Label
			if label == "" {
				label = fmt.Sprintf("dispatch %d", i)
			}
			return fmt.Errorf("metal-emu: %s (%s): %w", label, name, err)
		}
	}
	return nil
}

func (c *cmdBuf) runOne(disp *driver.Dispatch) error {
	p, ok := disp.Pipeline.(*pipeline)
	if !ok || p == nil {
		return errors.New("pipeline is not one of this emulator's")
	}
	if p.d.lib != c.d.lib {
		return errors.New("pipeline belongs to another emulator library")
	}
	n := 1
	for _, t := range disp.Threads {
		if t <= 0 {
			return fmt.Errorf("threads per threadgroup %v", disp.Threads)
		}
		n *= t
	}
	if n > p.max {
		return fmt.Errorf("threadgroup of %v = %d threads exceeds the pipeline's maximum %d (maxTotalThreadsPerThreadgroup)", disp.Threads, n, p.max)
	}
	for _, g := range disp.Groups {
		if g < 0 || g > math.MaxUint32 {
			return fmt.Errorf("threadgroups %v", disp.Groups)
		}
		if g == 0 {
			return nil
		}
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	k := p.kernel
	nb := k.Buffers()
	if len(disp.Args) > nb {
		nb = len(disp.Args)
	}
	ptrs := make([]uintptr, nb+1)
	for _, prm := range k.Params {
		if prm.BufferIndex < 0 {
			continue
		}
		i := prm.BufferIndex
		if i >= len(disp.Args) || (disp.Args[i].Buf == nil && disp.Args[i].Bytes == nil) {
			if prm.FunctionConstant != "" && !p.constTrue(prm.FunctionConstant) {
				continue // an optional buffer its function constant turned off
			}
			return fmt.Errorf("%s:%d: parameter %s [[buffer(%d)]] is not bound", k.File, k.Line, prm.Name, i)
		}
		a := disp.Args[i]
		if a.Buf != nil {
			b, ok := a.Buf.(*buffer)
			if !ok {
				return fmt.Errorf("argument %d is not an emulator buffer", i)
			}
			if b.dead {
				return fmt.Errorf("argument %d (parameter %s) was released", i, prm.Name)
			}
			if a.Offset < 0 || a.Offset > b.size {
				return fmt.Errorf("argument %d (parameter %s): offset %d outside a buffer of %d bytes", i, prm.Name, a.Offset, b.size)
			}
			if need := p.sizes[i]; need > b.size-a.Offset {
				return fmt.Errorf("%s:%d: parameter %s (%s) needs %d bytes, the buffer bound at [[buffer(%d)]] has %d after offset %d", k.File, k.Line, prm.Name, prm.Type, need, i, b.size-a.Offset, a.Offset)
			}
			base := b.base()
			ptrs[i] = uintptr(base) + uintptr(a.Offset)
		} else {
			if len(a.Bytes) == 0 {
				return fmt.Errorf("argument %d (parameter %s): empty bytes", i, prm.Name)
			}
			if need := p.sizes[i]; need > len(a.Bytes) {
				return fmt.Errorf("%s:%d: parameter %s (%s) needs %d bytes, %d bytes are bound at [[buffer(%d)]]", k.File, k.Line, prm.Name, prm.Type, need, len(a.Bytes), i)
			}
			pin.Pin(&a.Bytes[0])
			ptrs[i] = uintptr(unsafe.Pointer(&a.Bytes[0]))
		}
	}
	errBuf := make([]byte, 4096)
	consts := make([]uint32, len(p.consts)+2) // never empty
	copy(consts, p.consts)
	c.d.mu.Lock()
	L := &launchArgs{
		kernel:   int64(p.id),
		threads:  int64(c.d.threads),
		schedule: int64(c.d.schedule - Forward),
		seed:     c.d.seed,
		nargs:    int64(nb),
		nconsts:  int64(len(p.consts) / 2),
		errcap:   int64(len(errBuf)),
	}
	if c.d.timeout > 0 {
		L.timeoutMS = max(1, c.d.timeout.Milliseconds())
	}
	c.d.mu.Unlock()
	for i := 0; i < 3; i++ {
		L.groups[i] = uint32(disp.Groups[i])
		L.tg[i] = uint32(disp.Threads[i])
	}
	pin.Pin(&ptrs[0])
	pin.Pin(&consts[0])
	pin.Pin(&errBuf[0])
	pin.Pin(L)
	L.args = uintptr(unsafe.Pointer(&ptrs[0]))
	L.consts = uintptr(unsafe.Pointer(&consts[0]))
	L.err = uintptr(unsafe.Pointer(&errBuf[0]))
	rc := c.d.lib.run(L)
	c.stats.Rounds += L.rounds
	c.stats.Switches += L.switches
	runtime.KeepAlive(disp)
	if rc != 0 {
		msg := string(errBuf)
		if i := strings.IndexByte(msg, 0); i >= 0 {
			msg = msg[:i]
		}
		if L.faultAddr != 0 {
			msg += faultWhere(uintptr(L.faultAddr), k, disp.Args, ptrs)
		}
		return errors.New(msg)
	}
	return nil
}

// faultWhere names the argument buffer nearest to a faulting address.
func faultWhere(addr uintptr, k Kernel, args []driver.Arg, ptrs []uintptr) string {
	best, bestDist := "", uintptr(1<<62)
	for _, prm := range k.Params {
		i := prm.BufferIndex
		if i < 0 || i >= len(args) || ptrs[i] == 0 {
			continue
		}
		start := ptrs[i]
		size := len(args[i].Bytes)
		if args[i].Buf != nil {
			size = args[i].Buf.Size() - args[i].Offset
		}
		end := start + uintptr(size)
		var dist uintptr
		var s string
		switch {
		case addr >= end:
			dist = addr - end
			s = fmt.Sprintf("%d bytes past the end of", addr-end)
		case addr < start:
			dist = start - addr
			s = fmt.Sprintf("%d bytes before the start of", start-addr)
		default:
			dist = 0
			s = fmt.Sprintf("at byte %d of", addr-start)
		}
		if dist < bestDist {
			best, bestDist = fmt.Sprintf(" (%s [[buffer(%d)]] %s, %d bytes)", s, i, prm.Name, size), dist
		}
	}
	if bestDist > 1<<20 {
		return ""
	}
	return best
}

func splitLines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
