// Package driver is the seam between Forge's Metal backend and whatever
// runs its kernels: the GPU through Metal.framework (package metal, darwin
// only) or the emulator that runs the same MSL sources on the CPU (package
// metal/emu). Everything above the seam — which kernel, grid and
// threadgroup sizes, buffer bindings, the buffer pool, the pipeline cache,
// batching many kernels into one command buffer — lives in package metal
// and is shared by both drivers.
//
// The seam is deliberately narrow: buffers in memory the host can read and
// write (Apple silicon has unified memory, the emulator uses host memory),
// pipelines looked up by kernel name and function constants, and command
// buffers that encode dispatches and complete asynchronously.
package driver

import (
	"fmt"
	"strings"
	"time"
)

// Buffer is a block of device memory the host can address directly
// (MTLStorageModeShared on Apple silicon).
type Buffer interface {
	// Bytes is the buffer's memory, len == Size. The host may read or write
	// it only while no command buffer that uses the buffer is in flight.
	Bytes() []byte
	// Size is the buffer's length in bytes.
	Size() int
	// Release frees the buffer. It must not be used afterwards, and must
	// not be released while a command buffer that uses it is in flight.
	Release()
}

// ConstType is the type of a function constant.
type ConstType uint8

const (
	Bool ConstType = iota
	Int32
	UInt32
	Float32
)

func (t ConstType) String() string {
	switch t {
	case Bool:
		return "bool"
	case Int32:
		return "int"
	case UInt32:
		return "uint"
	case Float32:
		return "float"
	}
	return fmt.Sprintf("const(%d)", uint8(t))
}

// Constant is the value of the function constant declared with
// [[function_constant(Index)]]. Bits holds the value's bit pattern
// (0 or 1 for Bool, the two's-complement or IEEE bits otherwise).
type Constant struct {
	Index int
	Type  ConstType
	Bits  uint32
}

// PipelineKey names one specialisation of a kernel: the kernel function's
// name (its [[host_name]] for template instances) and the values of its
// function constants, in ascending Index order.
type PipelineKey struct {
	Kernel    string
	Constants []Constant
}

// String is the key's canonical text, used as a cache key:
// "kernel" or "kernel[0:bool=1,2:uint=64]".
func (k PipelineKey) String() string {
	if len(k.Constants) == 0 {
		return k.Kernel
	}
	var b strings.Builder
	b.WriteString(k.Kernel)
	b.WriteByte('[')
	for i, c := range k.Constants {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%s=%d", c.Index, c.Type, c.Bits)
	}
	b.WriteByte(']')
	return b.String()
}

// Pipeline is a compiled kernel specialisation.
type Pipeline interface {
	Key() PipelineKey
	// MaxThreads is the largest threadgroup the pipeline can run
	// (maxTotalThreadsPerThreadgroup).
	MaxThreads() int
	// SIMDWidth is the SIMD-group width (threadExecutionWidth): 32 on
	// Apple GPUs and in the emulator.
	SIMDWidth() int
}

// Arg is one kernel argument, bound at [[buffer(i)]] for the i-th Arg of a
// Dispatch: either a buffer at a byte offset (Buf != nil) or a small block
// of bytes copied at encode time (setBytes: a constant struct or scalar).
type Arg struct {
	Buf    Buffer
	Offset int
	Bytes  []byte
}

// Dispatch is one kernel launch with dispatchThreadgroups semantics:
// Groups threadgroups of Threads threads each.
type Dispatch struct {
	Pipeline Pipeline
	Args     []Arg
	Groups   [3]int
	Threads  [3]int
	// Label names the launch in errors and GPU captures (optional).
	Label string
}

// CommandBuffer collects dispatches and runs them in order after Commit.
// Dispatches in one command buffer run in encoding order, each seeing the
// memory effects of the ones before it (serial compute encoder).
type CommandBuffer interface {
	// Encode appends a dispatch. Bytes arguments are copied; buffer
	// arguments are referenced and must stay alive until completion.
	Encode(d Dispatch)
	// Commit submits the command buffer; Encode may not be called after.
	Commit()
	// Wait blocks until the command buffer completed and returns its error
	// (a GPU fault, an emulated kernel's crash), naming the failing
	// dispatch's label where the driver knows it.
	Wait() error
	// Done reports, without blocking, whether the command buffer completed.
	Done() bool
	// GPUTime is the span the device spent executing the command buffer
	// (GPUStartTime to GPUEndTime); valid after Wait.
	GPUTime() time.Duration
}

// ConcurrentCommandBuffer is a CommandBuffer that can run dispatches
// without ordering them against each other (an optional interface: the
// backend checks for it with a type assertion). The dispatches encoded
// between BeginConcurrent and EndConcurrent form a concurrent region (on
// Metal, a compute encoder of MTLDispatchTypeConcurrent): they may run in
// any order or at once, so none may write memory another of them reads or
// writes unless a Barrier separates them. The region as a whole runs after
// every dispatch encoded before it and before every one encoded after it.
// Commit ends an open region.
type ConcurrentCommandBuffer interface {
	CommandBuffer
	BeginConcurrent()
	// Barrier orders the region's dispatches encoded after it after
	// those encoded before it (memoryBarrierWithScope: buffers).
	Barrier()
	EndConcurrent()
}

// Driver runs kernels. Implementations are safe for use by one goroutine
// at a time (the backend serialises access).
type Driver interface {
	// Name is the backend name the driver serves: "metal" or "metal-emu".
	Name() string
	// Device describes the device, e.g. "Apple M3 Max" or
	// "metal-emu (clang 19.1.7, 2 threads)".
	Device() string
	// NewBuffer allocates size bytes of zeroed shared memory.
	NewBuffer(size int) (Buffer, error)
	// Pipeline compiles (or finds) the specialisation named by key. A
	// compile error names the source file and line.
	Pipeline(key PipelineKey) (Pipeline, error)
	// NewCommandBuffer starts a command buffer.
	NewCommandBuffer() CommandBuffer
	// Close releases the driver's resources.
	Close() error
}

// TensorOpsLevel says how a device runs kernels written against MSL 4.0's
// tensor operations (MetalPerformancePrimitives' matmul2d:
// kernels/matmul2d.metal).
type TensorOpsLevel int

const (
	// TensorOpsNone: not at all (an older OS or GPU, or the kernels do not
	// compile).
	TensorOpsNone TensorOpsLevel = iota
	// TensorOpsSupported: they run, on the shader cores (Metal 4 GPUs
	// before the Apple10 family): correct, not faster than the
	// simdgroup_matrix kernels.
	TensorOpsSupported
	// TensorOpsAccelerated: they run on the GPU cores' neural accelerators
	// (the Apple10 family: M5, A19 and later).
	TensorOpsAccelerated
)

func (l TensorOpsLevel) String() string {
	switch l {
	case TensorOpsNone:
		return "none"
	case TensorOpsSupported:
		return "supported"
	case TensorOpsAccelerated:
		return "accelerated"
	}
	return fmt.Sprintf("TensorOpsLevel(%d)", int(l))
}

// TensorOps is implemented by drivers that know whether their device runs
// the MSL 4.0 tensor-op kernels (an optional interface: the backend checks
// for it with a type assertion, and a driver without it runs none).
type TensorOps interface {
	// TensorOps reports the device's level; it may compile the tensor-op
	// kernel files the first time (a failed compile is TensorOpsNone).
	TensorOps() TensorOpsLevel
}

// UsesTensorOps reports whether a kernel source includes Metal 4's tensor
// headers (<metal_tensor>, MetalPerformancePrimitives): it needs MSL 4.0
// (the Metal driver compiles it so; the emulator with the shim's tensor
// operations).
func UsesTensorOps(src string) bool {
	for _, l := range strings.Split(src, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") && strings.Contains(l, "include") &&
			(strings.Contains(l, "<metal_tensor>") || strings.Contains(l, "MetalPerformancePrimitives")) {
			return true
		}
	}
	return false
}

// WorkingSet is implemented by drivers that know how much memory their
// device can use before performance suffers (Metal's
// recommendedMaxWorkingSetSize; on Apple silicon a share of the unified
// memory). The backend sizes its buffer pool from it.
type WorkingSet interface {
	// RecommendedWorkingSet is the device's budget in bytes, 0 if unknown.
	RecommendedWorkingSet() int64
}

// LibraryCompiler is implemented by drivers that compile each kernel
// source file into a library of its own on first use (the GPU's: one
// MTLLibrary per file), so that a check can compile every file up front
// and time each one (forge doctor). A driver that compiles every file when
// it opens (the emulator) does not implement it.
type LibraryCompiler interface {
	// CompileLibrary compiles the source file (a name of the sources the
	// driver opened with, e.g. "rope.metal") unless it is compiled
	// already, and returns the language it compiled it as ("MSL 3.1"). A
	// compile error names the file and line.
	CompileLibrary(file string) (language string, err error)
}

// LibraryPrecompiler is implemented by drivers that can compile their kernel
// libraries ahead of the first Pipeline call, several at once (an optional
// interface: the backend checks for it with a type assertion; a driver
// without it compiles each library when a kernel of it is first asked
// for). The backend calls it once, before its first Pipeline call, and
// holds its lock meanwhile, so the single-goroutine rule of Driver still
// holds from the caller's side; the driver may use goroutines inside.
type LibraryPrecompiler interface {
	// CompileLibraries compiles every library Pipeline would compile on
	// first use, except those a device cannot run (the tensor-op files on
	// a GPU without them), calling progress on the calling goroutine after
	// each with how many are done of how many. A library that fails to
	// compile is not an error here: Pipeline reports it, with its file and
	// line, when one of its kernels is asked for.
	CompileLibraries(progress func(done, total int))
}

// PipelineArchive is implemented by drivers that can keep compiled
// pipelines across processes (Metal: an MTLBinaryArchive). The backend
// decides where the archive lives, when it is opened and saved, and what
// to do with one that does not load; the driver only opens, fills and
// writes it.
type PipelineArchive interface {
	// ArchiveIdentity names what compiled pipelines depend on besides
	// the kernel sources: the GPU, the OS version and build, the compile
	// options. An archive is reused only under the same identity.
	ArchiveIdentity() string
	// OpenArchive makes Pipeline look each pipeline up in the archive
	// file at path first, and add to the archive the ones it has to
	// compile; path "" starts an empty archive. An error means the file
	// is unreadable or not a valid archive; the driver then has none.
	OpenArchive(path string) error
	// SaveArchive writes the archive, with every pipeline added since it
	// was opened, to the file path (which it creates or replaces).
	SaveArchive(path string) error
	// ArchiveCounts reports how many pipelines Pipeline found in the
	// archive and how many it compiled and added, since OpenArchive.
	ArchiveCounts() (hits, added int)
}

// PageSize is the page size of Apple silicon (vm_page_size: 16 KiB), the
// granule of HostMemory buffers.
const PageSize = 16 << 10

// HostMemory is implemented by drivers that can make a buffer of memory
// the host already has, without copying it (Metal's
// newBufferWithBytesNoCopy:length:options:deallocator:): a model file
// mapped read-only becomes device memory as it is, so the file cache is
// the GPU's memory (an optional interface: the backend checks for it with
// a type assertion; without it, or when it refuses, the backend copies).
type HostMemory interface {
	// NewBufferNoCopy returns a buffer whose Bytes are mem itself. mem
	// must start on a page boundary and be a whole number of pages long
	// (Metal's rule; the emulator checks PageSize, the rule on Apple
	// silicon, on every host). The memory may be mapped read-only: a
	// kernel that writes it faults. Release drops the buffer, never the
	// memory: its owner unmaps it, after the buffer is released.
	NewBufferNoCopy(mem []byte) (Buffer, error)
}
