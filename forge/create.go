package forge

import (
	"math"
	"math/bits"
	"slices"

	"github.com/forgeml/forge/forge/backend"
)

// maxNumel bounds the elements of one tensor (2⁴⁰, 4 TiB of float32), so a
// mistyped shape fails with an error rather than an out-of-memory crash.
const maxNumel = 1 << 40

// checkShape panics on negative dimensions and on shapes too large to hold.
func checkShape(op string, shape []int) {
	for _, d := range shape {
		if d < 0 {
			panic(errorf(op, "negative dimension in shape %v", shape))
		}
	}
	if slices.Contains(shape, 0) {
		return
	}
	n := uint64(1)
	for _, d := range shape {
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > maxNumel {
			panic(errorf(op, "shape %v has more than 2⁴⁰ elements", shape))
		}
		n = lo
	}
}

// checkDType panics unless dt is a known dtype.
func checkDType(op string, dt DType, shape []int) {
	switch dt {
	case Float32, Float64, Int32, Float16, BFloat16:
		return
	}
	panic(errorf(op, "unknown dtype %v for shape %v; use forge.Float32, Float64, Int32, Float16 or BFloat16", dt, shape))
}

// fullOn returns a tensor of shape filled with v on dev.
// op names the call in errors.
func fullOn(op string, dev *Device, dt DType, shape []int, v float64) *Tensor {
	checkShape(op, shape)
	checkDType(op, dt, shape)
	t := newTensorOp(op, dev, dt, shape)
	launch(dev, kcall{out: tensors(t), name: "fill", dt: dt, shapes: shapesOf(t), bytes: bytesOf(t)},
		func(b backend.Backend) { b.Fill(t.bv(), v) })
	return t
}

// Zeros returns a float32 tensor of zeros on the default device.
func Zeros(shape ...int) *Tensor { return fullOn("zeros", DefaultDevice(), Float32, shape, 0) }

// Ones returns a float32 tensor of ones on the default device.
func Ones(shape ...int) *Tensor { return fullOn("ones", DefaultDevice(), Float32, shape, 1) }

// Full returns a float32 tensor filled with v on the default device.
func Full(v float64, shape ...int) *Tensor { return fullOn("full", DefaultDevice(), Float32, shape, v) }

// ZerosOf returns a tensor of zeros of dtype dt.
func ZerosOf(dt DType, shape ...int) *Tensor { return fullOn("zeros", DefaultDevice(), dt, shape, 0) }

// FullOf returns a tensor of dtype dt filled with v.
func FullOf(dt DType, v float64, shape ...int) *Tensor {
	return fullOn("full", DefaultDevice(), dt, shape, v)
}

// EmptyOf returns a tensor of dtype dt on the default device whose values
// are unspecified (torch.empty): memory that is written before it is read,
// such as the weights of a model about to be loaded. Nothing is filled.
func EmptyOf(dt DType, shape ...int) *Tensor {
	checkShape("empty", shape)
	checkDType("empty", dt, shape)
	return newTensorOp("empty", DefaultDevice(), dt, shape)
}

// ZerosLike returns zeros with t's shape, dtype and device.
func ZerosLike(t *Tensor) *Tensor { return fullOn("zeros_like", t.dev, t.dtype, t.shape, 0) }

// OnesLike returns ones with t's shape, dtype and device.
func OnesLike(t *Tensor) *Tensor { return fullOn("ones_like", t.dev, t.dtype, t.shape, 1) }

// FullLike returns v everywhere with t's shape, dtype and device.
func FullLike(t *Tensor, v float64) *Tensor { return fullOn("full_like", t.dev, t.dtype, t.shape, v) }

// Scalar returns a 0-dimensional float32 tensor holding v.
func Scalar(v float64) *Tensor { return fullOn("scalar", DefaultDevice(), Float32, nil, v) }

// FromSlice copies data ([]float32, []float64 or []int32) into a new tensor
// on the default device. With no shape the tensor is 1-D; otherwise the
// shape's product must equal len(data). For a Float16 or BFloat16 tensor,
// cast one: FromSlice(float32s).Cast(forge.Float16).
func FromSlice(data any, shape ...int) *Tensor {
	return fromSliceOn(DefaultDevice(), data, shape)
}

func fromSliceOn(dev *Device, data any, shape []int) *Tensor {
	var n int
	var dt DType
	switch d := data.(type) {
	case []float32:
		n, dt = len(d), Float32
	case []float64:
		n, dt = len(d), Float64
	case []int32:
		n, dt = len(d), Int32
	case []int:
		v := make([]int32, len(d))
		for i, x := range d {
			if x != int(int32(x)) {
				panic(errorf("from_slice", "value %d at index %d does not fit int32", x, i))
			}
			v[i] = int32(x)
		}
		return fromSliceOn(dev, v, shape)
	case []uint16:
		panic(errorf("from_slice", "[]uint16 is ambiguous (float16 or bfloat16 bits); make a float32 tensor and Cast it to forge.Float16 or forge.BFloat16"))
	default:
		panic(errorf("from_slice", "unsupported data type %T; use []float32, []float64, []int32 or []int", data))
	}
	if len(shape) == 0 {
		shape = []int{n}
	}
	checkShape("from_slice", shape)
	if numel(shape) != n {
		panic(errorf("from_slice", "shape %v holds %d elements but the slice has %d", shape, numel(shape), n))
	}
	t := newTensorOp("from_slice", dev, dt, shape)
	dev.b.Write(t.buf, data)
	return t
}

// Arange returns the float32 values start, start+step, … below stop (above
// it for a negative step), like numpy.arange.
func Arange(start, stop, step float64) *Tensor {
	if step == 0 || math.IsNaN(step) || math.IsInf(step, 0) {
		panic(errorf("arange", "step must be finite and non-zero, got %v", step))
	}
	if math.IsNaN(start) || math.IsInf(start, 0) || math.IsNaN(stop) || math.IsInf(stop, 0) {
		panic(errorf("arange", "bounds must be finite, got [%v, %v)", start, stop))
	}
	count := math.Ceil((stop - start) / step)
	if count > 1<<31 {
		panic(errorf("arange", "[%v, %v) with step %v has %.3g elements, more than a tensor holds", start, stop, step, count))
	}
	n := max(int(count), 0)
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(start + float64(i)*step)
	}
	return FromSlice(v, n)
}

// ArangeInt returns the int32 values 0, 1, …, n−1.
func ArangeInt(n int) *Tensor {
	if n < 0 || n > math.MaxInt32 {
		panic(errorf("arange", "length must be in [0, 2³¹), got %d", n))
	}
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(i)
	}
	return FromSlice(v, n)
}

// To returns the tensor on device d (t itself if it is already there). The
// copy is differentiable.
func (t *Tensor) To(d *Device) *Tensor {
	if t.dev == d {
		return t
	}
	c := t.contiguousCopy()
	host := hostSlice(c.dtype, c.Numel())
	c.dev.b.Read(c.buf, host)
	out := newTensorOp("to", d, c.dtype, c.shape)
	d.b.Write(out.buf, host)
	src := t.dev
	return record(out, "to", []*Tensor{t}, func(g *Tensor) []*Tensor { return []*Tensor{g.To(src)} })
}

// Cast returns the tensor converted to dtype dt (t itself if it has it).
// Casts between float dtypes (Float32, Float64, Float16, BFloat16) are
// differentiable: the gradient is cast back to t's dtype. A cast to
// Float16 or BFloat16 rounds to nearest even (±Inf past the largest finite
// value, NaN stays NaN); one from them is exact. A cast from a float to
// Int32 truncates toward zero.
func (t *Tensor) Cast(dt DType) *Tensor {
	if t.dtype == dt {
		return t
	}
	checkDType("cast", dt, t.shape)
	out := newTensorOp("cast", t.dev, dt, t.shape)
	launch(t.dev, kcall{in: tensors(t), out: tensors(out), name: "copy", dt: t.dtype, shapes: shapesOf(t, out), bytes: bytesOf(t, out)},
		func(b backend.Backend) { b.Copy(out.bv(), t.bv()) })
	if !t.dtype.IsFloat() || !dt.IsFloat() {
		return out
	}
	from := t.dtype
	return record(out, "cast", []*Tensor{t}, func(g *Tensor) []*Tensor { return []*Tensor{g.Cast(from)} })
}

// hostSlice returns a host slice of n elements for a buffer of dtype dt:
// []uint16 bit patterns for Float16 and BFloat16.
func hostSlice(dt DType, n int) any {
	switch dt {
	case Float32:
		return make([]float32, n)
	case Float64:
		return make([]float64, n)
	case Float16, BFloat16:
		return make([]uint16, n)
	}
	return make([]int32, n)
}

// contiguousCopy returns a new contiguous tensor with t's values (no graph).
func (t *Tensor) contiguousCopy() *Tensor {
	out := newTensor(t.dev, t.dtype, t.shape)
	launch(t.dev, kcall{in: tensors(t), out: tensors(out), name: "copy", dt: t.dtype, shapes: shapesOf(t, out), bytes: bytesOf(t, out)},
		func(b backend.Backend) { b.Copy(out.bv(), t.bv()) })
	return out
}

// Clone returns a differentiable contiguous copy of t.
func (t *Tensor) Clone() *Tensor {
	out := t.contiguousCopy()
	return record(out, "clone", []*Tensor{t}, func(g *Tensor) []*Tensor { return []*Tensor{g} })
}

// shapeOf returns a copy of a shape for safe retention.
func shapeOf(s []int) []int { return slices.Clone(s) }

// CopyFrom writes src's values (broadcast to t's shape, converted to t's
// dtype) into t's memory, in place, and returns t. Views of t see the new
// values. In-place writes are not recorded by autograd: call it inside
// NoGrad (as an optimizer does) on a tensor that requires a gradient. A
// source sharing t's memory is copied first.
func (t *Tensor) CopyFrom(src *Tensor) *Tensor {
	sameDevice("copy_from", t, src)
	shape := broadcastShapes("copy_from", src.shape, t.shape)
	if !equalShape(shape, t.shape) {
		panic(errorf("copy_from", "source %v does not broadcast to destination %v", src.shape, t.shape))
	}
	if t.requiresGrad && GradEnabled() {
		panic(errorf("copy_from", "in-place write to %v, which requires a gradient, while recording; wrap it in forge.NoGrad", t.shape))
	}
	if src.buf == t.buf {
		src = src.contiguousCopy() // the source overlaps: read it before writing
	}
	copyInto(t, src.broadcastView(t.shape))
	return t
}
