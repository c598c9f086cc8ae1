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
	"github.com/forgeml/forge/metal/driver"
)

var (
	kCrossEntropyBy     = namesByDType("cross_entropy")
	kCrossEntropyBackBy = namesByDType("cross_entropy", "backward")

	// The ops' names in panics: their float32 kernels.
	kCrossEntropy     = kCrossEntropyBy[backend.Float32]
	kCrossEntropyBack = kCrossEntropyBackBy[backend.Float32]

	// kCEBackKeys are the backward's pipelines by dtype, without and with
	// the upstream gradient g (constant 0, ce_upstream).
	kCEBackKeys = func() (k [backend.BFloat16 + 1][2]driver.PipelineKey) {
		for _, dt := range floatTypes {
			k[dt] = [2]driver.PipelineKey{pkey(kCrossEntropyBackBy[dt], cBool(0, false)), pkey(kCrossEntropyBackBy[dt], cBool(0, true))}
		}
		return k
	}()
)

// crossEntropyKernels lists the kernels of this file (for the tests).
var crossEntropyKernels = allNames(kCrossEntropyBy, kCrossEntropyBackBy)

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

// ceSetup checks the views of a cross-entropy kernel and returns the
// logits' dtype, the rows, the vocabulary and the parameter block (with
// the targets' binding). logits are float32, float16 or bfloat16, dlogits
// (nil Buf in the forward) has their dtype, f32 (loss, lse) are float32;
// views with a nil Buf are skipped.
func ceSetup(kernel string, logits, dlogits, targets backend.View, ignore int, f32 ...backend.View) (dt backend.DType, n, v int, prm crossEntropyParams) {
	dt = floatDType(kernel, logits, dlogits)
	checkKernelDType(kernel, onlyF32, f32...)
	if targets.DType() != backend.Int32 {
		panic(fmt.Sprintf("metal: %s: targets must be int32, got %v", kernel, targets.DType()))
	}
	if !logits.IsContiguous() {
		panic(fmt.Sprintf("metal: %s: logits must be contiguous (shape %v strides %v)", kernel, logits.Shape, logits.Strides))
	}
	n, v = lastAxisRows(logits) // (0, 0) for an empty vocabulary: nothing to do, as on the CPU
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
	return dt, n, v, prm
}

// ceRun launches cross-entropy row kernel over n rows of v, one
// threadgroup per row: up to 1024 threads for few rows (a large vocabulary
// then still spreads over the device), 256 for many.
func (b *Backend) ceRun(kernel string, key driver.PipelineKey, n, v int, args ...kernelArg) {
	most := 256
	if n < 64 {
		most = 1024
	}
	pipe, t := b.rowThreadsFor(key, v, most)
	b.runPipe(kernel, key, pipe, rowGrid(n), [3]int{t, 1, 1}, args...)
}

// CrossEntropy writes loss (N), −log softmax(logits)[target] or 0 where
// target == ignore, and lse (N), the row log-sum-exp; either may have a nil
// Buf (not written). logits are float32, float16 or bfloat16 (widened,
// float32 math); loss and lse are float32.
func (b *Backend) CrossEntropy(loss, lse, logits, targets backend.View, ignore int) {
	dt, n, v, prm := ceSetup(kCrossEntropy, logits, backend.View{}, targets, ignore, loss, lse)
	if n == 0 {
		return
	}
	if loss.Buf != nil {
		prm.Flags |= ceWriteLoss
	}
	if lse.Buf != nil {
		prm.Flags |= ceWriteLSE
	}
	b.ceRun(kCrossEntropyBy[dt], pkey(kCrossEntropyBy[dt]), n, v, b.arg(loss), b.arg(lse), b.arg(logits), b.arg(targets), bytesArg(prm))
}

// CrossEntropyBackward writes dlogits = g·scale·(softmax(logits) −
// onehot(target)) from the saved lse, zero rows where target == ignore;
// g (one float32 element, or a nil Buf for 1) is read on the device.
// dlogits may be logits itself (the same view: an in-place update).
// dlogits has the logits' dtype (float32, float16 or bfloat16: float32
// math, a 16-bit dlogits rounded once); lse is float32.
func (b *Backend) CrossEntropyBackward(dlogits, logits, lse, targets, g backend.View, ignore int, scale float64) {
	dt, n, v, prm := ceSetup(kCrossEntropyBack, logits, dlogits, targets, ignore, lse, g)
	if g.Buf != nil && g.Numel() != 1 {
		panic(fmt.Sprintf("metal: %s: upstream gradient %v must hold one element", kCrossEntropyBack, g.Shape))
	}
	if n == 0 || v == 0 {
		return
	}
	kernel := kCrossEntropyBackBy[dt]
	if !dlogits.IsContiguous() {
		panic(fmt.Sprintf("metal: %s: dlogits must be contiguous", kernel))
	}
	prm.Scale = float32(scale)
	key := kCEBackKeys[dt][0]
	if g.Buf != nil {
		key = kCEBackKeys[dt][1]
	}
	// Without g, buffer 5 is bound to a placeholder the kernel never reads.
	b.ceRun(kernel, key, n, v, b.arg(dlogits), b.arg(logits), b.arg(lse), b.arg(targets), bytesArg(prm), b.arg(g))
}
