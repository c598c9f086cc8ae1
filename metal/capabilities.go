package metal

import "github.com/forgeml/forge/forge/backend"

// Metal computes in float32, widening float16 and bfloat16 inputs and
// rounding 16-bit outputs once; it has no float64.
var (
	capFloats = backend.DTypesOf(floatTypes...)
	capF32    = backend.DTypesOf(onlyF32...)
)

// capabilities is Metal's capability table, checked against the kernels' own
// dtype checks by TestCapabilities.
var capabilities = backend.Capabilities{
	backend.KernelFill:                capStored(),
	backend.KernelCopy:                capStored(),
	backend.KernelUnary:               capFloats,
	backend.KernelBinary:              capFloats,
	backend.KernelWhere:               capFloats, // the kernel also selects int32; forge selects floats only
	backend.KernelReduce:              capFloats,
	backend.KernelMatMul:              capFloats,
	backend.KernelSoftmax:             capFloats,
	backend.KernelLayerNorm:           capFloats,
	backend.KernelRMSNorm:             capFloats,
	backend.KernelRoPE:                capFloats,
	backend.KernelRoPEStrided:         capFloats,
	backend.KernelIndex:               backend.DTypesOf(f32OrI32...),
	backend.KernelAttention:           capFloats,
	backend.KernelAttentionRowStrided: capFloats,
	backend.KernelCrossEntropy:        capFloats,
	backend.KernelSumSquares:          capFloats,
	backend.KernelAdamW:               capF32,
	backend.KernelGradClip:            capF32,
	backend.KernelSwiGLU:              capFloats,
}

func capStored() backend.DTypes { return backend.DTypesOf(storeTypes...) }

// Capabilities returns Metal's kernel table (a copy).
func (b *Backend) Capabilities() backend.Capabilities { return capabilities.Without() }
