package metal

// CrossEntropy and CrossEntropyBackward (kernels/crossentropy.metal): the
// fused classifier loss over float32 logits (N, V), one threadgroup per
// row; the softmax is never stored.

import (
	"fmt"
	"math"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
)

var (
	kCrossEntropy     = kernels.Name("cross_entropy", "f32")
	kCrossEntropyBack = kernels.Name("cross_entropy", "backward", "f32")
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
func ceSetup(kernel string, logits, targets backend.View, ignore int, views ...backend.View) (n, v int, prm crossEntropyParams) {
	checkKernelDType(kernel, onlyF32, append(views, logits)...)
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
// Buf (not written).
func (b *Backend) CrossEntropy(loss, lse, logits, targets backend.View, ignore int) {
	n, v, prm := ceSetup(kCrossEntropy, logits, targets, ignore, loss, lse)
	if n == 0 {
		return
	}
	if loss.Buf != nil {
		prm.Flags |= ceWriteLoss
	}
	if lse.Buf != nil {
		prm.Flags |= ceWriteLSE
	}
	t := b.ceThreads(kCrossEntropy, n, v)
	b.run(kCrossEntropy, pkey(kCrossEntropy), rowGrid(n), [3]int{t, 1, 1},
		b.arg(loss), b.arg(lse), b.arg(logits), b.arg(targets), bytesArg(prm))
}

// CrossEntropyBackward writes dlogits = scale·(softmax(logits) −
// onehot(target)) from the saved lse, zero rows where target == ignore.
// dlogits may be logits itself (the same view: an in-place update).
func (b *Backend) CrossEntropyBackward(dlogits, logits, lse, targets backend.View, ignore int, scale float64) {
	n, v, prm := ceSetup(kCrossEntropyBack, logits, targets, ignore, dlogits, lse)
	if n == 0 || v == 0 {
		return
	}
	if !dlogits.IsContiguous() {
		panic(fmt.Sprintf("metal: %s: dlogits must be contiguous", kCrossEntropyBack))
	}
	prm.Scale = float32(scale)
	t := b.ceThreads(kCrossEntropyBack, n, v)
	b.run(kCrossEntropyBack, pkey(kCrossEntropyBack), rowGrid(n), [3]int{t, 1, 1},
		b.arg(dlogits), b.arg(logits), b.arg(lse), b.arg(targets), bytesArg(prm))
}

// crossEntropyKernels lists the kernels of this file (for the tests).
var crossEntropyKernels = []string{kCrossEntropy, kCrossEntropyBack}
