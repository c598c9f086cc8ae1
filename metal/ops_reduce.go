package metal

// Reduce, Softmax and SoftmaxBackward (kernels/reduce.metal,
// softmax.metal): one threadgroup per output or row.
//
// float16 and bfloat16: loaded widened, reduced in float32, and rounded
// once where a 16-bit output is stored (kernels by dtype, named once
// below).

import (
	"fmt"

	"github.com/forgeml/forge/forge/backend"
)

var (
	// kReduceBy[src] is the reduce kernel with a 32-bit dst (float32
	// values or int32 indices); kReduceSameBy[src] the one whose dst has
	// src's dtype (values only; the same kernel for float32).
	kReduceBy      = namesByDTypeTo(backend.Float32, "reduce")
	kReduceSameBy  = namesByDType("reduce")
	kSoftmaxBy     = namesByDType("softmax")
	kSoftmaxBackBy = namesByDType("softmax", "backward")

	// The ops' names in panics: their float32 kernels.
	kReduce      = kReduceBy[backend.Float32]
	kSoftmax     = kSoftmaxBy[backend.Float32]
	kSoftmaxBack = kSoftmaxBackBy[backend.Float32]

	// Dispatch labels: "reduce_f16_f32.argmax", "softmax_f32.log", ….
	reduceLabels         = opLabels(kReduceBy, backend.NumReduceOps)
	reduceSameLabels     = opLabels(kReduceSameBy, backend.NumReduceOps)
	softmaxLogLabels     = withSuffix(kSoftmaxBy, ".log")
	softmaxBackLogLabels = withSuffix(kSoftmaxBackBy, ".log")
)

// reduceKernels lists the kernels of this file (for the tests).
var reduceKernels = allNames(kReduceBy, kReduceSameBy, kSoftmaxBy, kSoftmaxBackBy)

// reduceParams mirrors ReduceParams in kernels/reduce.metal.
type reduceParams struct {
	NOut     uint32
	NR       uint32
	KDim     uint32
	RDim     uint32
	KShape   [maxDims]uint32
	KStrides [maxDims]int32
	RShape   [maxDims]uint32
	RStrides [maxDims]int32
}

// rowThreads is the threadgroup size for rows of n elements: a multiple of
// the SIMD width, at least one simdgroup, at most most (and the
// pipeline's maximum).
func rowThreads(n, most, maxThreads, simd int) int {
	t := min(most, maxThreads)
	t -= t % simd
	want := (n + simd - 1) / simd * simd
	return max(simd, min(t, want))
}

// maxGridX is the most threadgroups a row kernel puts along the grid's x.
const maxGridX = 65535

// rowGrid spreads n row threadgroups over a 2-D grid (x fastest); the
// kernels skip the rows ≥ n of the last line.
func rowGrid(n int) [3]int {
	if n <= maxGridX {
		return [3]int{n, 1, 1}
	}
	return [3]int{maxGridX, (n + maxGridX - 1) / maxGridX, 1}
}

// Reduce reduces the last nred dimensions of src (float32, float16 or
// bfloat16, strided) into the contiguous dst: for sum, max and min dst is
// src's dtype or, for a 16-bit src, float32; for argmax and argmin int32
// indices into the flattened reduced extent. A 16-bit src is reduced in
// float32 (the sum compensated) and a 16-bit dst rounded once (max and min
// exactly).
func (b *Backend) Reduce(op backend.ReduceOp, dst, src backend.View, nred int) {
	if nred < 0 || nred > len(src.Shape) {
		panic(fmt.Sprintf("metal: %s: nred %d out of range for shape %v", kReduce, nred, src.Shape))
	}
	checkKernelDType(kReduce, floatTypes, src)
	sdt := src.DType()
	kernel, labels := kReduceBy[sdt], reduceLabels[sdt]
	switch op {
	case backend.ReduceArgMax, backend.ReduceArgMin:
		if dst.DType() != backend.Int32 {
			panic(fmt.Sprintf("metal: %s: %v needs an int32 dst, have %v", kernel, op, dst.DType()))
		}
	case backend.ReduceSum, backend.ReduceMax, backend.ReduceMin:
		checkKernelDType(kernel, floatTypes, dst)
		switch ddt := dst.DType(); {
		case ddt == sdt && sdt.IsHalf():
			kernel, labels = kReduceSameBy[sdt], reduceSameLabels[sdt]
		case ddt != sdt && ddt != backend.Float32:
			want := sdt.String()
			if sdt.IsHalf() {
				want += " or float32"
			}
			panic(fmt.Sprintf("metal: %s: %v of %v src into a %v dst (want %s)", kernel, op, sdt, ddt, want))
		}
	default:
		panic(fmt.Sprintf("metal: %s: unknown op %v", kernel, op))
	}
	k := len(src.Shape) - nred
	kept := backend.View{Offset: src.Offset, Shape: src.Shape[:k], Strides: src.Strides[:k]}
	red := backend.View{Shape: src.Shape[k:], Strides: src.Strides[k:]}
	nout, nr := kept.Numel(), red.Numel()
	if nout == 0 {
		return
	}
	if nr == 0 {
		if op != backend.ReduceSum {
			panic(fmt.Sprintf("metal: %s: %v over an empty extent (shape %v, nred %d)", kReduce, op, src.Shape, nred))
		}
		b.Fill(backend.View{Buf: dst.Buf, Offset: dst.Offset, Shape: []int{nout}, Strides: []int{1}}, 0)
		return
	}
	checkCount(kernel, nout*nr)
	kl, rl := coalesce(kept), coalesce(red)
	if len(kl.shape) > maxDims || len(rl.shape) > maxDims {
		// Too many dimensions survive coalescing: reduce a contiguous copy.
		cv, free := b.contiguous(src)
		defer free()
		b.Reduce(op, dst, cv, nred)
		return
	}
	p := reduceParams{NOut: uint32(nout), NR: uint32(nr), KDim: uint32(len(kl.shape)), RDim: uint32(len(rl.shape))}
	if nout == 1 {
		p.KDim = 0 // the kept layout of a full reduction is a dummy dimension of 1
	}
	kl.dimsArgs(kernel, &p.KShape, &p.KStrides)
	rl.dimsArgs(kernel, &p.RShape, &p.RStrides)
	key := pkey(kernel, cUint(0, uint32(op)), cBool(1, len(rl.shape) == 1))
	most := 256
	if nout < 64 {
		most = 1024 // few outputs: more threads per output
	}
	pipe, t := b.rowThreadsFor(key, nr, most)
	b.runPipe(labels[op], key, pipe, rowGrid(nout), [3]int{t, 1, 1},
		b.arg(dst), b.arg(backend.View{Buf: src.Buf, Offset: src.Offset}), bytesArg(p))
}

// softmaxParams mirrors SoftmaxParams in kernels/softmax.metal.
type softmaxParams struct {
	Rows, Cols uint32
}

// Softmax writes y = softmax(x) (log-softmax if log) over the last axis;
// x and y contiguous, both float32, float16 or bfloat16 (16-bit: float32
// math, y rounded once).
func (b *Backend) Softmax(y, x backend.View, log bool) {
	dt := floatDType(kSoftmax, y, x)
	b.softmax(&kSoftmaxBy, &softmaxLogLabels, dt, log, x, y, x)
}

// SoftmaxBackward writes dx from the forward output y and dy; contiguous,
// all float32, float16 or bfloat16 (16-bit: float32 math, dx rounded
// once).
func (b *Backend) SoftmaxBackward(dx, y, dy backend.View, log bool) {
	dt := floatDType(kSoftmaxBack, dx, y, dy)
	b.softmax(&kSoftmaxBackBy, &softmaxBackLogLabels, dt, log, y, dx, y, dy)
}

// softmax launches kernel names[dt] (labelled logLabels[dt] if log) over
// the rows of the last axis of rows, one threadgroup per row, binding
// views (at most 3) and the row sizes.
func (b *Backend) softmax(names, logLabels *byDType, dt backend.DType, log bool, rows backend.View, views ...backend.View) {
	kernel := names[dt]
	n, cols := lastAxisRows(rows)
	if n == 0 {
		return
	}
	checkCount(kernel, n*cols)
	label := kernel
	if log {
		label = logLabels[dt]
	}
	key := pkey(kernel, cBool(0, log))
	pipe, t := b.rowThreadsFor(key, cols, 256)
	var args [4]kernelArg
	for i, v := range views {
		args[i] = b.arg(v)
	}
	args[len(views)] = bytesArg(softmaxParams{uint32(n), uint32(cols)})
	b.runPipe(label, key, pipe, rowGrid(n), [3]int{t, 1, 1}, args[:len(views)+1]...)
}
