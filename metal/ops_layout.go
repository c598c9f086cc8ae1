package metal

// Shared plumbing of the ops: dtype checks, pipeline keys, grid sizes and
// the coalescing of strided views into the fixed-size parameter blocks the
// kernels take (kernels/*.metal).

import (
	"fmt"
	"math"
	"strings"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/driver"
)

// maxDims is the rank the elementwise kernels index after coalescing
// (FILL_MAX_DIMS, COPY_MAX_DIMS, UNARY_MAX_DIMS, BINARY_MAX_DIMS and
// REDUCE_MAX_DIMS in kernels/*.metal). Views with more dimensions left
// after coalescing run as several dispatches over their leading ones.
const maxDims = 8

// ewThreads is the threadgroup size of the elementwise kernels, and
// ewMaxGroups caps their grid: each thread then loops over the elements
// with a stride of the grid size.
const (
	ewThreads   = 256
	ewMaxGroups = 1024
)

// checkKernelDType panics unless every view has one of the allowed dtypes,
// naming the kernel. Float64 gets its own message: Metal has no float64.
func checkKernelDType(kernel string, allowed []backend.DType, views ...backend.View) {
	for _, v := range views {
		if v.Buf == nil {
			continue
		}
		dt := v.DType()
		ok := false
		for _, a := range allowed {
			if dt == a {
				ok = true
			}
		}
		if ok {
			continue
		}
		if dt == backend.Float64 {
			panic(errFloat64(kernel))
		}
		panic(fmt.Sprintf("metal: %s: unsupported dtype %v (want %v)", kernel, dt, allowed))
	}
}

var (
	onlyF32  = []backend.DType{backend.Float32}
	f32OrI32 = []backend.DType{backend.Float32, backend.Int32}
	// floatTypes are the float dtypes the elementwise kernels compute on
	// (in float32, rounding once on store to a 16-bit dtype).
	floatTypes = []backend.DType{backend.Float32, backend.Float16, backend.BFloat16}
	// storeTypes are every dtype the backend stores.
	storeTypes = []backend.DType{backend.Float32, backend.Int32, backend.Float16, backend.BFloat16}
)

// dtypeTag is a dtype's part of kernel names: f32, i32, f16 or bf16.
func dtypeTag(dt backend.DType) string {
	switch dt {
	case backend.Float32:
		return "f32"
	case backend.Int32:
		return "i32"
	case backend.Float16:
		return "f16"
	case backend.BFloat16:
		return "bf16"
	}
	panic(fmt.Sprintf("metal: no kernels for dtype %v", dt))
}

// byDType is a kernel name (or a dispatch label) per float dtype, indexed
// by the dtype. Every per-dtype table of the ops is one (or an array of
// them, indexed by a kernel's part): built once, indexed per call.
type byDType [backend.BFloat16 + 1]string

// namesByDType returns the names parts…_<tag> of the kernels for every
// float dtype.
func namesByDType(parts ...string) (n byDType) {
	for _, dt := range floatTypes {
		n[dt] = kernels.Name(append(append([]string(nil), parts...), dtypeTag(dt))...)
	}
	return n
}

// namesByDTypeTo returns the names parts…_<tag>[_<out>] of the kernels
// for every float dtype that write a dst of dtype out, named where it
// differs from the operands' (reduce_f16_f32, reduce_f32).
func namesByDTypeTo(out backend.DType, parts ...string) (n byDType) {
	for _, dt := range floatTypes {
		name := append(append([]string(nil), parts...), dtypeTag(dt))
		if out != dt {
			name = append(name, dtypeTag(out))
		}
		n[dt] = kernels.Name(name...)
	}
	return n
}

// withSuffix returns the dispatch labels name+suffix of t's names
// ("softmax_f16.log").
func withSuffix(t byDType, suffix string) (l byDType) {
	for _, dt := range floatTypes {
		l[dt] = t[dt] + suffix
	}
	return l
}

// opLabels returns the dispatch labels name.op of t's names for the n ops
// 0 … n−1 (n an enum's count: backend.NumUnaryOps, …), by dtype and op
// ("unary_f32.exp").
func opLabels[Op interface {
	~uint8
	String() string
}](t byDType, n Op) (l [backend.BFloat16 + 1][]string) {
	for _, dt := range floatTypes {
		for op := Op(0); op < n; op++ {
			l[dt] = append(l[dt], t[dt]+"."+op.String())
		}
	}
	return l
}

// allNames lists the names of every float dtype of the tables (for the
// tests).
func allNames(tables ...byDType) []string {
	var names []string
	for _, t := range tables {
		for _, dt := range floatTypes {
			names = append(names, t[dt])
		}
	}
	return names
}

// sameDType panics unless every view (with a Buf) has views[0]'s dtype.
func sameDType(kernel string, views ...backend.View) {
	dt := views[0].DType()
	for _, v := range views[1:] {
		if v.Buf != nil && v.DType() != dt {
			panic(fmt.Sprintf("metal: %s: mixed dtypes %v and %v (the views of one call share a dtype)", kernel, dt, v.DType()))
		}
	}
}

// floatDType checks the views of a kernel that takes float32, float16 or
// bfloat16, all of one dtype (checkKernelDType, sameDType), and returns
// that dtype (views[0]'s).
func floatDType(kernel string, views ...backend.View) backend.DType {
	checkKernelDType(kernel, floatTypes, views...)
	sameDType(kernel, views...)
	return views[0].DType()
}

// namedView is a view of a call with its parameter name (for messages).
type namedView struct {
	name string
	v    backend.View
}

// dtypeList describes the views' dtypes for a message: "x float16, y
// float32"; a view with a nil Buf reads absent ("x none"), or is left out
// when absent is "".
func dtypeList(views []namedView, absent string) string {
	var s []string
	for _, a := range views {
		dt := absent
		if a.v.Buf != nil {
			dt = a.v.DType().String()
		}
		if dt != "" {
			s = append(s, a.name+" "+dt)
		}
	}
	return strings.Join(s, ", ")
}

// pkey is the pipeline key of a kernel with function constants (given in
// ascending index order). A kernel takes at most fastConsts of them, so
// that every key the ops build goes through the pipeline cache's fast
// index (pipeline.go).
func pkey(kernel string, consts ...driver.Constant) driver.PipelineKey {
	if len(consts) > fastConsts {
		panic(fmt.Sprintf("metal: %s: %d function constants, more than the pipeline cache's fast index takes (fastConsts = %d)",
			kernel, len(consts), fastConsts))
	}
	return driver.PipelineKey{Kernel: kernel, Constants: consts}
}

func cBool(index int, v bool) driver.Constant {
	var bits uint32
	if v {
		bits = 1
	}
	return driver.Constant{Index: index, Type: driver.Bool, Bits: bits}
}

func cUint(index int, v uint32) driver.Constant {
	return driver.Constant{Index: index, Type: driver.UInt32, Bits: v}
}

// runEW launches an elementwise kernel over n elements: ewThreads (or the
// pipeline's maximum) threads a group, grid-stride loops past ewMaxGroups
// groups.
func (b *Backend) runEW(label string, key driver.PipelineKey, n int, args ...kernelArg) {
	pipe := b.pipelineFor(key)
	t := min(ewThreads, pipe.MaxThreads())
	g := min((n+t-1)/t, ewMaxGroups)
	b.runPipe(label, key, pipe, [3]int{g, 1, 1}, [3]int{t, 1, 1}, args...)
}

// rowThreadsFor returns key's pipeline and rowThreads for it: rows of n
// elements, at most most threads.
func (b *Backend) rowThreadsFor(key driver.PipelineKey, n, most int) (driver.Pipeline, int) {
	pipe := b.pipelineFor(key)
	return pipe, rowThreads(n, most, pipe.MaxThreads(), pipe.SIMDWidth())
}

// lastAxisRows views a tensor as rows of its last axis: (0, 0) when that
// axis is empty.
func lastAxisRows(v backend.View) (rows, cols int) {
	cols = 1
	if len(v.Shape) > 0 {
		cols = v.Shape[len(v.Shape)-1]
	}
	if cols == 0 {
		return 0, 0
	}
	return v.Numel() / cols, cols
}

// layout is k views of one shape with their dimensions coalesced: size-1
// dimensions dropped and adjacent dimensions merged where every view's
// strides allow (row-major order is kept, so flat indices survive).
type layout struct {
	shape   []int
	strides [][]int // strides[v][d]
	offsets []int   // offsets[v]: the views' element offsets
}

// coalesce builds the layout of views sharing views[0].Shape.
func coalesce(views ...backend.View) layout {
	c := backend.Coalesce(views...)
	return layout{shape: c.Shape, strides: c.Strides, offsets: c.Offsets}
}

// numel is the number of elements of the layout.
func (l layout) numel() int {
	n := 1
	for _, d := range l.shape {
		n *= d
	}
	return n
}

// split calls fn for sub-layouts of at most maxd dimensions covering l: l
// itself, or, when it has more, one per index of its leading dimensions
// (with the views' offsets moved there).
func (l layout) split(maxd int, fn func(sub layout)) {
	if len(l.shape) <= maxd {
		fn(l)
		return
	}
	for i := 0; i < l.shape[0]; i++ {
		l.at(i).split(maxd, fn)
	}
}

// at returns the layout of index i of l's leading dimension: its other
// dimensions, with the views' offsets moved there.
func (l layout) at(i int) layout {
	sub := layout{shape: l.shape[1:], strides: make([][]int, len(l.strides)), offsets: make([]int, len(l.offsets))}
	for v := range l.strides {
		sub.strides[v] = l.strides[v][1:]
		sub.offsets[v] = l.offsets[v] + i*l.strides[v][0]
	}
	return sub
}

// view returns view v of the layout: buf at the layout's offset (the shape
// does not matter to arg, which binds the buffer at the offset).
func (l layout) view(buf backend.Buffer, v int) backend.View {
	return backend.View{Buf: buf, Offset: l.offsets[v]}
}

// dimsArgs fills the kernels' shape and stride arrays from l (at most
// maxDims dimensions), checking that every offset the kernel computes fits
// its int32 arithmetic.
func (l layout) dimsArgs(kernel string, shape *[maxDims]uint32, strides ...*[maxDims]int32) {
	if len(l.shape) > maxDims {
		panic(fmt.Sprintf("metal: %s: %d dimensions after coalescing (max %d)", kernel, len(l.shape), maxDims))
	}
	for d, n := range l.shape {
		shape[d] = uint32(n)
	}
	for v, st := range strides {
		span := 0
		for d, s := range l.strides[v] {
			st[d] = int32(s)
			span += absInt(s) * (l.shape[d] - 1)
		}
		if span > math.MaxInt32 {
			panic(fmt.Sprintf("metal: %s: a view spans %d elements, beyond the kernels' int32 offsets", kernel, span))
		}
	}
}

func absInt(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// checkCount panics when n elements do not fit the kernels' uint32 counts.
func checkCount(kernel string, n int) {
	if n > math.MaxInt32 {
		panic(fmt.Sprintf("metal: %s: %d elements, beyond the kernels' 32-bit indices", kernel, n))
	}
}

// The names ops_matmul.go gives in its panics.
var (
	kMatMul      = kernels.Name("matmul", "f32")
	kMatMulNaive = kernels.Name("matmul", "naive", "f32")
)

// contiguous returns v itself if it is contiguous, else a contiguous copy
// (and a function freeing it): the fallback of kernels that index only
// contiguous operands, or only so many strided dimensions.
func (b *Backend) contiguous(v backend.View) (backend.View, func()) {
	if v.IsContiguous() {
		return v, func() {}
	}
	tmp := b.Alloc(v.DType(), v.Numel())
	cv := backend.View{Buf: tmp, Shape: v.Shape, Strides: backend.ContiguousStrides(v.Shape)}
	b.Copy(cv, v)
	return cv, func() { b.Free(tmp) }
}
