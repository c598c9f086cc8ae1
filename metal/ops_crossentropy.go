package metal

// CrossEntropy and CrossEntropyBackward (kernels/crossentropy.metal): the
// fused classifier loss over float32, float16 or bfloat16 logits (N, V),
// one threadgroup per row; the softmax is never stored. loss and lse are
// float32 for every logits dtype; dlogits has the logits' dtype (16-bit:
// computed in float32, rounded once).

import (
	"fmt"
	"math"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
)

var (
	kCrossEntropy       = kernels.Name("cross_entropy", "f32")
	kCrossEntropyBack   = kernels.Name("cross_entropy", "backward", "f32")
	kCrossEntropyBy     = namesByDType("cross_entropy")
	kCrossEntropyBackBy = namesByDType("cross_entropy", "backward")
)

// crossEntropyParams mirrors CrossEntropyParams in
// kernels/crossentropy.metal.
type crossEntropyParams struct {
	Rows, Cols uint32
	TStride    int32
	Ignore     int32
	Scale      float32
	Flags      uint32
}

// Flags of crossEntropyParams (CE_WRITE_LOSS, CE_WRITE_LSE, CE_HAS_IGNORE).
const (
	ceWriteLoss = 1
	ceWriteLSE  = 2
	ceHasIgnore = 4
)

// ceSetup checks the views of a cross-entropy kernel and returns the rows,
// the vocabulary and the parameter block (with the targets' binding).
// logits are float32, float16 or bfloat16; same (dlogits) must have the
// logits' dtype, f32 (loss, lse) must be float32; views with a nil Buf are
// skipped.
func ceSetup(kernel string, logits, targets backend.View, ignore int, same, f32 []backend.View) (n, v int, prm crossEntropyParams) {
	checkKernelDType(kernel, floatTypes, logits)
	checkKernelDType(kernel, floatTypes, same...)
	checkKernelDType(kernel, onlyF32, f32...)
	for _, s := range same {
		if s.Buf != nil && s.DType() != logits.DType() {
			panic(fmt.Sprintf("metal: %s: dlogits %v for %v logits (dlogits has the logits' dtype)", kernel, s.DType(), logits.DType()))
		}
	}
	if targets.DType() != backend.Int32 {
		panic(fmt.Sprintf("metal: %s: targets must be int32, got %v", kernel, targets.DType()))
	}
	if !logits.IsContiguous() {
		panic(fmt.Sprintf("metal: %s: logits must be contiguous (shape %v strides %v)", kernel, logits.Shape, logits.Strides))
	}
	n, v = softmaxRows(logits) // (0, 0) for an empty vocabulary: nothing to do, as on the CPU
	if targets.Numel() < n {
		panic(fmt.Sprintf("metal: %s: %d targets for %d rows", kernel, targets.Numel(), n))
	}
	checkCount(kernel, n*v)
	tstride := 1
	if len(targets.Shape) == 1 {
		tstride = targets.Strides[0]
	} else if !targets.IsContiguous() {
		panic(fmt.Sprintf("metal: %s: targets of shape %v must be 1-D or contiguous", kernel, targets.Shape))
	}
	prm = crossEntropyParams{Rows: uint32(n), Cols: uint32(v), TStride: int32(tstride)}
	if ignore >= math.MinInt32 && ignore <= math.MaxInt32 {
		prm.Ignore = int32(ignore)
		prm.Flags |= ceHasIgnore
	}
	return n, v, prm
}

// ceThreads is the threadgroup size of a cross-entropy row kernel: up to
// 1024 threads for few rows (a large vocabulary then still spreads over
// the device), 256 for many.
func (b *Backend) ceThreads(kernel string, n, v int) int {
	pipe := b.pipelineFor(pkey(kernel))
	most := 256
	if n < 64 {
		most = 1024
	}
	return rowThreads(v, most, pipe.MaxThreads(), pipe.SIMDWidth())
}

// CrossEntropy writes loss (N), −log softmax(logits)[target] or 0 where
// target == ignore, and lse (N), the row log-sum-exp; either may have a nil
// Buf (not written). logits are float32, float16 or bfloat16 (widened,
// float32 math); loss and lse are float32.
func (b *Backend) CrossEntropy(loss, lse, logits, targets backend.View, ignore int) {
	n, v, prm := ceSetup(kCrossEntropy, logits, targets, ignore, nil, []backend.View{loss, lse})
	if n == 0 {
		return
	}
	kernel := kCrossEntropyBy[logits.DType()]
	if loss.Buf != nil {
		prm.Flags |= ceWriteLoss
	}
	if lse.Buf != nil {
		prm.Flags |= ceWriteLSE
	}
	t := b.ceThreads(kernel, n, v)
	b.run(kernel, pkey(kernel), rowGrid(n), [3]int{t, 1, 1},
		b.arg(loss), b.arg(lse), b.arg(logits), b.arg(targets), bytesArg(prm))
}

// CrossEntropyBackward writes dlogits = scale·(softmax(logits) −
// onehot(target)) from the saved lse, zero rows where target == ignore.
// dlogits may be logits itself (the same view: an in-place update).
// dlogits has the logits' dtype (float32, float16 or bfloat16: float32
// math, a 16-bit dlogits rounded once); lse is float32.
func (b *Backend) CrossEntropyBackward(dlogits, logits, lse, targets backend.View, ignore int, scale float64) {
	n, v, prm := ceSetup(kCrossEntropyBack, logits, targets, ignore, []backend.View{dlogits}, []backend.View{lse})
	if n == 0 || v == 0 {
		return
	}
	kernel := kCrossEntropyBackBy[logits.DType()]
	if !dlogits.IsContiguous() {
		panic(fmt.Sprintf("metal: %s: dlogits must be contiguous", kernel))
	}
	prm.Scale = float32(scale)
	t := b.ceThreads(kernel, n, v)
	b.run(kernel, pkey(kernel), rowGrid(n), [3]int{t, 1, 1},
		b.arg(dlogits), b.arg(logits), b.arg(lse), b.arg(targets), bytesArg(prm))
}

// crossEntropyKernels lists the kernels of this file (for the tests).
var crossEntropyKernels = []string{
	kCrossEntropyBy[backend.Float32], kCrossEntropyBy[backend.Float16], kCrossEntropyBy[backend.BFloat16],
	kCrossEntropyBackBy[backend.Float32], kCrossEntropyBackBy[backend.Float16], kCrossEntropyBackBy[backend.BFloat16],
}
