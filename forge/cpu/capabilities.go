package cpu

import "github.com/forgeml/forge/forge/backend"

// The CPU computes in float32 and float64 (float64 is the reference that
// gradient checks run in) and stores every dtype.
var (
	computed = backend.DTypesOf(backend.Float32, backend.Float64)
	stored   = backend.DTypesOf(backend.Float32, backend.Float64, backend.Int32, backend.Float16, backend.BFloat16)
)

// kernels is the CPU's capability table. The required kernels are listed
// here; each optional kernel is declared in the file that implements it
// (declare), so that adding one touches only that file.
var kernels = backend.Capabilities{
	backend.KernelFill:         stored,
	backend.KernelCopy:         stored,
	backend.KernelUnary:        computed,
	backend.KernelBinary:       computed,
	backend.KernelWhere:        computed,
	backend.KernelReduce:       computed,
	backend.KernelMatMul:       computed,
	backend.KernelSoftmax:      computed,
	backend.KernelLayerNorm:    computed,
	backend.KernelRMSNorm:      computed,
	backend.KernelRoPE:         computed,
	backend.KernelIndex:        backend.DTypesOf(backend.Float32, backend.Float64, backend.Int32),
	backend.KernelAttention:    computed,
	backend.KernelCrossEntropy: computed,
	backend.KernelSumSquares:   computed,
	backend.KernelAdamW:        computed,
}

// declare adds an optional kernel to the table, from the file that
// implements it: var _ = declare(backend.KernelX, computed).
func declare(kernel string, dts backend.DTypes) struct{} {
	kernels[kernel] = dts
	return struct{}{}
}

// Capabilities returns the CPU's kernel table (a copy).
func (b *Backend) Capabilities() backend.Capabilities { return kernels.Without() }
