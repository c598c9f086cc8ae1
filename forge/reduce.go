package forge

import (
	"slices"

	"github.com/forgeml/forge/forge/backend"
)

// reduceAxes normalises axes (none = all), sorted and unique.
func (t *Tensor) reduceAxes(op string, axes []int) []int {
	if len(axes) == 0 {
		all := make([]int, t.Dim())
		for i := range all {
			all[i] = i
		}
		return all
	}
	out := make([]int, 0, len(axes))
	for _, a := range axes {
		out = append(out, t.axis(op, a))
	}
	slices.Sort(out)
	if len(slices.Compact(slices.Clone(out))) != len(out) {
		panic(errorf(op, "repeated axis in %v for shape %v", axes, t.shape))
	}
	return out
}

// reduceRaw runs a reduction kernel over axes (normalised) and returns the
// result with the reduced axes removed (no graph).
func (t *Tensor) reduceRaw(op backend.ReduceOp, axes []int, dt DType) *Tensor {
	// Permute so kept axes come first and reduced axes last (a view).
	var kept []int
	red := map[int]bool{}
	for _, a := range axes {
		red[a] = true
	}
	for i := range t.shape {
		if !red[i] {
			kept = append(kept, i)
		}
	}
	perm := append(slices.Clone(kept), axes...)
	shape, strides := make([]int, len(perm)), make([]int, len(perm))
	for i, p := range perm {
		shape[i], strides[i] = t.shape[p], t.strides[p]
	}
	src := t.view(shape, strides, t.offset)
	outShape := shape[:len(kept)]
	if numel(shape[len(kept):]) == 0 && (op != backend.ReduceSum) {
		panic(errorf(op.String(), "cannot reduce an empty axis of shape %v", t.shape))
	}
	out := newTensor(t.dev, dt, outShape)
	launch(t.dev, kcall{in: tensors(t), out: tensors(out), name: "reduce." + op.String(), dt: t.dtype, shapes: shapesOf(t, out), bytes: bytesOf(t, out), flops: int64(t.Numel())},
		func(b backend.Backend) { b.Reduce(op, out.bv(), src.bv(), len(axes)) })
	return out
}

// Sum sums over axes (all axes if none), removing them.
func (t *Tensor) Sum(axes ...int) *Tensor { return t.sum("sum", axes, false) }

// SumKeep sums over axes, keeping them with size 1.
func (t *Tensor) SumKeep(axes ...int) *Tensor { return t.sum("sum", axes, true) }

func (t *Tensor) sum(op string, axes []int, keep bool) *Tensor {
	sameFloat(op, t)
	ax := t.reduceAxes(op, axes)
	out := t.reduceRaw(backend.ReduceSum, ax, t.dtype)
	kshape := keepDims(t.shape, ax)
	if keep {
		out = out.view(kshape, backend.ContiguousStrides(kshape), 0)
	}
	in := shapeOf(t.shape)
	return record(out, op, []*Tensor{t}, func(g *Tensor) []*Tensor {
		return []*Tensor{g.Reshape(kshape...).Expand(in...)}
	})
}

// Mean averages over axes (all if none), removing them.
func (t *Tensor) Mean(axes ...int) *Tensor { return t.mean(axes, false) }

// MeanKeep averages over axes, keeping them with size 1.
func (t *Tensor) MeanKeep(axes ...int) *Tensor { return t.mean(axes, true) }

func (t *Tensor) mean(axes []int, keep bool) *Tensor {
	sameFloat("mean", t)
	ax := t.reduceAxes("mean", axes)
	n := 1
	for _, a := range ax {
		n *= t.shape[a]
	}
	return t.sum("mean", axes, keep).MulScalar(1 / float64(n))
}

// Var returns the unbiased variance (divisor n−1, PyTorch's default) over
// axes (all if none), removing them.
func (t *Tensor) Var(axes ...int) *Tensor { return t.variance(axes, 1, false) }

// VarKeep is Var keeping the reduced axes with size 1.
func (t *Tensor) VarKeep(axes ...int) *Tensor { return t.variance(axes, 1, true) }

// VarCorrection returns the variance with divisor n−correction (0 gives the
// population variance) over axes, removing them.
func (t *Tensor) VarCorrection(correction int, axes ...int) *Tensor {
	return t.variance(axes, correction, false)
}

func (t *Tensor) variance(axes []int, correction int, keep bool) *Tensor {
	sameFloat("var", t)
	ax := t.reduceAxes("var", axes)
	n := 1
	for _, a := range ax {
		n *= t.shape[a]
	}
	d := t.Sub(t.MeanKeep(ax...))
	s := d.Mul(d).sum("var", ax, keep)
	return s.MulScalar(1 / float64(n-correction))
}

// Max returns the maximum over axes (all if none), removing them. The
// gradient is split evenly between tied maxima (torch.amax).
func (t *Tensor) Max(axes ...int) *Tensor { return t.extreme(backend.ReduceMax, axes, false) }

// MaxKeep is Max keeping the reduced axes with size 1.
func (t *Tensor) MaxKeep(axes ...int) *Tensor { return t.extreme(backend.ReduceMax, axes, true) }

// Min returns the minimum over axes (all if none), removing them.
func (t *Tensor) Min(axes ...int) *Tensor { return t.extreme(backend.ReduceMin, axes, false) }

// MinKeep is Min keeping the reduced axes with size 1.
func (t *Tensor) MinKeep(axes ...int) *Tensor { return t.extreme(backend.ReduceMin, axes, true) }

func (t *Tensor) extreme(op backend.ReduceOp, axes []int, keep bool) *Tensor {
	name := op.String()
	sameFloat(name, t)
	ax := t.reduceAxes(name, axes)
	out := t.reduceRaw(op, ax, t.dtype)
	kshape := keepDims(t.shape, ax)
	outK := out.view(kshape, backend.ContiguousStrides(kshape), 0)
	if keep {
		out = outK
	}
	in := shapeOf(t.shape)
	return record(out, name, []*Tensor{t}, func(g *Tensor) []*Tensor {
		mask := t.Eq(outK)                                         // 1 at every extreme
		count := mask.reduceRaw(backend.ReduceSum, ax, mask.dtype) // ties per output
		w := mask.Div(count.Reshape(kshape...))
		return []*Tensor{g.Reshape(kshape...).Expand(in...).Mul(w)}
	})
}

// ArgMax returns the int32 index of the first maximum along axis, removing it.
func (t *Tensor) ArgMax(axis int) *Tensor {
	sameFloat("argmax", t)
	return t.reduceRaw(backend.ReduceArgMax, []int{t.axis("argmax", axis)}, Int32)
}

// ArgMin returns the int32 index of the first minimum along axis, removing it.
func (t *Tensor) ArgMin(axis int) *Tensor {
	sameFloat("argmin", t)
	return t.reduceRaw(backend.ReduceArgMin, []int{t.axis("argmin", axis)}, Int32)
}
