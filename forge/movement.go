package forge

import (
	"slices"

	"github.com/forgeml/forge/forge/backend"
)

// Contiguous returns t if it is row-major without gaps, else a contiguous
// copy.
func (t *Tensor) Contiguous() *Tensor {
	if t.IsContiguous() {
		return t
	}
	out := t.contiguousCopy()
	return record(out, "contiguous", []*Tensor{t}, func(g *Tensor) []*Tensor { return []*Tensor{g} })
}

// Reshape returns a tensor with the same elements in row-major order and a
// new shape; one dimension may be -1 (inferred). It is a view when t is
// contiguous, else a copy.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	shape = inferShape("reshape", t, shape)
	if equalShape(shape, t.shape) {
		return t
	}
	src := t
	if !t.IsContiguous() {
		src = t.Contiguous()
	}
	out := src.view(shape, backend.ContiguousStrides(shape), src.offset)
	in := shapeOf(src.shape)
	out = record(out, "reshape", []*Tensor{src}, func(g *Tensor) []*Tensor { return []*Tensor{g.Reshape(in...)} })
	if out.node != nil {
		out.node.passOwned = true // a view of g, or a copy
	}
	return out
}

// View is Reshape.
func (t *Tensor) View(shape ...int) *Tensor { return t.Reshape(shape...) }

func inferShape(op string, t *Tensor, shape []int) []int {
	shape = slices.Clone(shape)
	infer := -1
	n := 1
	for i, d := range shape {
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 0:
			panic(errorf(op, "invalid shape %v for tensor of shape %v", shape, t.shape))
		default:
			n *= d
		}
	}
	if infer >= 0 {
		if n == 0 || t.Numel()%n != 0 {
			panic(errorf(op, "cannot infer -1 in %v for %d elements (shape %v)", shape, t.Numel(), t.shape))
		}
		shape[infer] = t.Numel() / n
		n *= shape[infer]
	}
	if n != t.Numel() {
		panic(errorf(op, "shape %v holds %d elements but the tensor %v has %d", shape, n, t.shape, t.Numel()))
	}
	return shape
}

// Flatten merges axes start..end (inclusive) into one.
func (t *Tensor) Flatten(start, end int) *Tensor {
	if t.Dim() == 0 {
		return t.Reshape(1)
	}
	s, e := t.axis("flatten", start), t.axis("flatten", end)
	if s > e {
		panic(errorf("flatten", "start axis %d after end axis %d for shape %v", start, end, t.shape))
	}
	shape := append(slices.Clone(t.shape[:s]), numel(t.shape[s:e+1]))
	shape = append(shape, t.shape[e+1:]...)
	return t.Reshape(shape...)
}

// Unsqueeze inserts a dimension of size 1 at axis (0..Dim()).
func (t *Tensor) Unsqueeze(axis int) *Tensor {
	n := t.Dim()
	if axis < 0 {
		axis += n + 1
	}
	if axis < 0 || axis > n {
		panic(errorf("unsqueeze", "axis %d out of range [%d, %d] for shape %v", axis, -n-1, n, t.shape))
	}
	shape := slices.Insert(slices.Clone(t.shape), axis, 1)
	stride := 1
	if axis < n {
		stride = t.strides[axis] * t.shape[axis]
	}
	strides := slices.Insert(slices.Clone(t.strides), axis, stride)
	return t.restride("unsqueeze", shape, strides)
}

// restride returns a view of t with a new shape and strides holding the
// same elements in the same order (dimensions of size 1 added or removed);
// its gradient is reshaped back.
func (t *Tensor) restride(op string, shape, strides []int) *Tensor {
	out := t.view(shape, strides, t.offset)
	in := shapeOf(t.shape)
	return record(out, op, []*Tensor{t}, func(g *Tensor) []*Tensor { return []*Tensor{g.Reshape(in...)} })
}

// Squeeze removes the given axes, which must have size 1; with no axes it
// removes every size-1 axis.
func (t *Tensor) Squeeze(axes ...int) *Tensor {
	drop := make([]bool, t.Dim())
	if len(axes) == 0 {
		for i, d := range t.shape {
			drop[i] = d == 1
		}
	}
	for _, a := range axes {
		a = t.axis("squeeze", a)
		if t.shape[a] != 1 {
			panic(errorf("squeeze", "axis %d has size %d, not 1, in shape %v", a, t.shape[a], t.shape))
		}
		drop[a] = true
	}
	var shape, strides []int
	for i, d := range t.shape {
		if !drop[i] {
			shape = append(shape, d)
			strides = append(strides, t.strides[i])
		}
	}
	if len(shape) == len(t.shape) {
		return t
	}
	return t.restride("squeeze", shape, strides)
}

// Permute reorders the axes: output axis i is input axis perm[i]. No copy.
func (t *Tensor) Permute(perm ...int) *Tensor {
	n := t.Dim()
	if len(perm) != n {
		panic(errorf("permute", "permutation %v has %d axes, tensor %v has %d", perm, len(perm), t.shape, n))
	}
	seen := make([]bool, n)
	shape, strides := make([]int, n), make([]int, n)
	given := perm
	perm = slices.Clone(perm)
	for i, p := range perm {
		if p < 0 {
			p += n
		}
		if p < 0 || p >= n || seen[p] {
			panic(errorf("permute", "%v is not a permutation of the %d axes of %v", given, n, t.shape))
		}
		seen[p] = true
		shape[i], strides[i] = t.shape[p], t.strides[p]
		perm[i] = p
	}
	out := t.view(shape, strides, t.offset)
	inv := make([]int, n)
	for i, p := range perm {
		inv[p] = i
	}
	out = record(out, "permute", []*Tensor{t}, func(g *Tensor) []*Tensor { return []*Tensor{g.Permute(inv...)} })
	if out.node != nil {
		out.node.passOwned = true // a view of g
	}
	return out
}

// Transpose swaps axes a and b. No copy.
func (t *Tensor) Transpose(a, b int) *Tensor {
	a, b = t.axis("transpose", a), t.axis("transpose", b)
	perm := make([]int, t.Dim())
	for i := range perm {
		perm[i] = i
	}
	perm[a], perm[b] = b, a
	return t.Permute(perm...)
}

// T transposes the last two axes (a 1-D tensor is returned unchanged).
func (t *Tensor) T() *Tensor {
	if t.Dim() < 2 {
		return t
	}
	return t.Transpose(-2, -1)
}

// Expand broadcasts t to shape (numpy rules: size-1 axes stretch, new
// leading axes are added) without copying; -1 keeps an axis.
func (t *Tensor) Expand(shape ...int) *Tensor {
	shape = slices.Clone(shape)
	n, m := len(shape), t.Dim()
	if n < m {
		panic(errorf("expand", "cannot expand %v to fewer dimensions %v", t.shape, shape))
	}
	strides := make([]int, n)
	for i := range shape {
		j := i - (n - m)
		if j < 0 {
			if shape[i] < 0 {
				panic(errorf("expand", "-1 is not allowed for a new axis: %v to %v", t.shape, shape))
			}
			continue
		}
		if shape[i] == -1 {
			shape[i] = t.shape[j]
		}
		if shape[i] < 0 {
			panic(errorf("expand", "invalid size %d in %v for tensor %v", shape[i], shape, t.shape))
		}
		switch {
		case t.shape[j] == shape[i]:
			strides[i] = t.strides[j]
		case t.shape[j] == 1:
			strides[i] = 0
		default:
			panic(errorf("expand", "cannot expand %v to %v: axis %d has size %d", t.shape, shape, j, t.shape[j]))
		}
	}
	if equalShape(shape, t.shape) {
		return t
	}
	out := t.view(shape, strides, t.offset)
	in := shapeOf(t.shape)
	return record(out, "expand", []*Tensor{t}, func(g *Tensor) []*Tensor { return []*Tensor{sumTo(g, in)} })
}

// Narrow returns the view of length elements of axis starting at start.
func (t *Tensor) Narrow(axis, start, length int) *Tensor {
	a := t.axis("narrow", axis)
	if start < 0 {
		start += t.shape[a]
	}
	if start < 0 || length < 0 || start+length > t.shape[a] {
		panic(errorf("narrow", "range [%d, %d) out of bounds for axis %d of shape %v", start, start+length, a, t.shape))
	}
	shape := slices.Clone(t.shape)
	shape[a] = length
	out := t.view(shape, slices.Clone(t.strides), t.offset+start*t.strides[a])
	in := shapeOf(t.shape)
	order := denseOrder(t.shape, t.strides)
	out = record(out, "narrow", []*Tensor{t}, func(g *Tensor) []*Tensor {
		return []*Tensor{padIntoOrdered(g, in, order, a, start)}
	})
	if out.node != nil {
		// The window of the input's gradient: add g there, nothing else
		// (copy it, where the window is still a pending zero).
		out.node.accumulate = func(acc, g *Tensor) {
			dst := acc.view(g.shape, acc.strides, acc.offset+start*acc.strides[a])
			if acc.takeZeroSpan(a, start, start+length) {
				copyInto(dst, g)
				return
			}
			addInto(dst, g)
		}
	}
	return out
}

// padIntoOrdered returns zeros of shape with g copied at [start, start+len)
// of axis, the result's axes laid out in memory in the given order
// (outermost first; nil: row-major), so that the gradient of a narrowed
// permuted view (the q, k, v of a fused QKV projection) has its input's
// layout, and the permutation's backward needs no copy.
//
// The zeros around the window are not written yet: they are pending
// (Tensor.pendingZero), so that the gradients of the other windows, which
// Backward accumulates through Narrow's accumulate, are copied into place
// rather than added to zeros written first. Backward writes whatever is
// still pending before anything reads the tensor (fillPendingZeros).
func padIntoOrdered(g *Tensor, shape, order []int, axis, start int) *Tensor {
	z := newTensor(g.dev, g.dtype, shape)
	if order != nil {
		z.strides = make([]int, len(shape))
		acc := 1
		for i := len(order) - 1; i >= 0; i-- {
			z.strides[order[i]] = acc
			acc *= shape[order[i]]
		}
	}
	length := g.shape[axis]
	zs := &zeroSpans{axis: axis}
	if start > 0 {
		zs.spans = append(zs.spans, [2]int{0, start})
	}
	if start+length < shape[axis] {
		zs.spans = append(zs.spans, [2]int{start + length, shape[axis]})
	}
	if len(zs.spans) > 0 {
		z.pendingZero = zs
	}
	dst := z.view(g.shape, z.strides, z.offset+start*z.strides[axis])
	copyInto(dst, g)
	return z
}

// zeroSpans are the spans [lo, hi) of one axis of a tensor still to be
// zeroed.
type zeroSpans struct {
	axis  int
	spans [][2]int
}

// takeZeroSpan reports whether [lo, hi) of axis lies inside a pending
// zero span of t, and if so removes it from the pending spans (the caller
// then writes it whole). Otherwise the pending zeros are written first, so
// the caller may add into t.
func (t *Tensor) takeZeroSpan(axis, lo, hi int) bool {
	z := t.pendingZero
	if z == nil {
		return false
	}
	if z.axis == axis {
		for i, s := range z.spans {
			if s[0] <= lo && hi <= s[1] {
				var rest [][2]int
				if s[0] < lo {
					rest = append(rest, [2]int{s[0], lo})
				}
				if hi < s[1] {
					rest = append(rest, [2]int{hi, s[1]})
				}
				z.spans = slices.Concat(z.spans[:i], rest, z.spans[i+1:])
				if len(z.spans) == 0 {
					t.pendingZero = nil
				}
				return true
			}
		}
	}
	t.fillPendingZeros()
	return false
}

// fillPendingZeros writes t's pending zero spans, if any.
func (t *Tensor) fillPendingZeros() {
	z := t.pendingZero
	if z == nil {
		return
	}
	t.pendingZero = nil
	for _, s := range z.spans {
		sh := slices.Clone(t.shape)
		sh[z.axis] = s[1] - s[0]
		v := t.view(sh, t.strides, t.offset+s[0]*t.strides[z.axis])
		launch(t.dev, kcall{out: tensors(v), name: "fill", dt: t.dtype, shapes: shapesOf(v), bytes: bytesOf(v)},
			func(b backend.Backend) { b.Fill(v.bv(), 0) })
	}
}

// denseOrder returns the axes of a view ordered by decreasing stride when
// the view covers a dense block of memory in some axis order (a
// permutation of a contiguous tensor), except when that order is the
// row-major one; else nil.
func denseOrder(shape, strides []int) []int {
	n := len(shape)
	if n < 2 || numel(shape) == 0 {
		return nil
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return strides[y] - strides[x] })
	acc := 1
	for i := n - 1; i >= 0; i-- {
		ax := order[i]
		if shape[ax] != 1 && strides[ax] != acc {
			return nil
		}
		acc *= shape[ax]
	}
	for i, ax := range order {
		if ax != i {
			return order
		}
	}
	return nil
}

// copyInto copies src into the (possibly strided) view dst, no graph.
func copyInto(dst, src *Tensor) {
	launch(dst.dev, kcall{in: tensors(src), out: tensors(dst), name: "copy", dt: src.dtype, shapes: shapesOf(src, dst), bytes: bytesOf(src, dst)},
		func(b backend.Backend) { b.Copy(dst.bv(), src.bv()) })
}

// Slice returns the view of [start, end) along axis; negative values count
// from the end and out-of-range values are clipped, as in Python.
func (t *Tensor) Slice(axis, start, end int) *Tensor {
	a := t.axis("slice", axis)
	n := t.shape[a]
	clip := func(i int) int {
		if i < 0 {
			i += n
		}
		return min(max(i, 0), n)
	}
	s, e := clip(start), clip(end)
	if e < s {
		e = s
	}
	return t.Narrow(a, s, e-s)
}

// Index selects element i of axis and drops the axis (a view).
func (t *Tensor) Index(axis, i int) *Tensor {
	a := t.axis("index", axis)
	if i < -t.shape[a] || i >= t.shape[a] {
		panic(errorf("index", "index %d out of range for axis %d of shape %v", i, a, t.shape))
	}
	if i < 0 {
		i += t.shape[a]
	}
	return t.Narrow(a, i, 1).Squeeze(a)
}

// Concat joins tensors along axis; all other axes must match.
func Concat(axis int, ts ...*Tensor) *Tensor {
	if len(ts) == 0 {
		panic(errorf("concat", "no tensors"))
	}
	first := ts[0]
	a := first.axis("concat", axis)
	total := 0
	for _, u := range ts {
		if u.Dim() != first.Dim() || u.dtype != first.dtype {
			panic(errorf("concat", "tensors differ in rank or dtype: %v %v and %v %v", first.dtype, first.shape, u.dtype, u.shape))
		}
		for i := range u.shape {
			if i != a && u.shape[i] != first.shape[i] {
				panic(errorf("concat", "shapes %v and %v differ outside axis %d", first.shape, u.shape, a))
			}
		}
		total += u.shape[a]
	}
	sameDevice("concat", ts...)
	shape := slices.Clone(first.shape)
	shape[a] = total
	out := newTensor(first.dev, first.dtype, shape)
	off := 0
	sizes := make([]int, len(ts))
	for i, u := range ts {
		dst := out.view(u.shape, out.strides, out.offset+off*out.strides[a])
		copyInto(dst, u)
		off += u.shape[a]
		sizes[i] = u.shape[a]
	}
	return record(out, "concat", slices.Clone(ts), func(g *Tensor) []*Tensor {
		return g.Split(a, sizes...)
	})
}

// Stack joins tensors of one shape along a new axis.
func Stack(axis int, ts ...*Tensor) *Tensor {
	if len(ts) == 0 {
		panic(errorf("stack", "no tensors"))
	}
	if n := ts[0].Dim(); axis < -n-1 || axis > n {
		panic(errorf("stack", "axis %d out of range [%d, %d] for tensors of shape %v", axis, -n-1, n, ts[0].shape))
	}
	us := make([]*Tensor, len(ts))
	for i, u := range ts {
		if !equalShape(u.shape, ts[0].shape) {
			panic(errorf("stack", "shapes differ: %v and %v", ts[0].shape, u.shape))
		}
		us[i] = u.Unsqueeze(axis)
	}
	return Concat(axis, us...)
}

// Split cuts t along axis into views of the given sizes, which must sum to
// the axis length.
func (t *Tensor) Split(axis int, sizes ...int) []*Tensor {
	a := t.axis("split", axis)
	sum := 0
	for _, s := range sizes {
		if s < 0 {
			panic(errorf("split", "negative size in %v", sizes))
		}
		sum += s
	}
	if sum != t.shape[a] {
		panic(errorf("split", "sizes %v sum to %d, axis %d of %v has %d", sizes, sum, a, t.shape, t.shape[a]))
	}
	out := make([]*Tensor, len(sizes))
	off := 0
	for i, s := range sizes {
		out[i] = t.Narrow(a, off, s)
		off += s
	}
	return out
}

// Chunk cuts t along axis into n pieces of equal size (the last may be
// smaller), like torch.chunk.
func (t *Tensor) Chunk(n, axis int) []*Tensor {
	a := t.axis("chunk", axis)
	if n <= 0 {
		panic(errorf("chunk", "number of chunks must be positive, got %d", n))
	}
	size := (t.shape[a] + n - 1) / n
	var sizes []int
	for left := t.shape[a]; left > 0; left -= size {
		sizes = append(sizes, min(size, left))
	}
	if len(sizes) == 0 {
		sizes = []int{0}
	}
	return t.Split(a, sizes...)
}

// checkIndices reads idx on the host and panics if any value is outside
// [0, n).
func checkIndices(op string, idx *Tensor, n int, shape []int) {
	if idx.dtype != Int32 {
		panic(errorf(op, "indices must be int32, got %v %v", idx.dtype, idx.shape))
	}
	v := idx.Int32s()
	for i, x := range v {
		if x < 0 || int(x) >= n {
			panic(errorf(op, "index %d at position %d out of range [0, %d) for shape %v", x, i, n, shape))
		}
	}
}

// groups splits shape around axis into (P, S, Q): the products before, at
// and after it.
func groups(shape []int, axis int) (p, s, q int) {
	return numel(shape[:axis]), shape[axis], numel(shape[axis+1:])
}

// IndexSelect picks entries idx (1-D int32) along axis:
// out[..., i, ...] = t[..., idx[i], ...].
func (t *Tensor) IndexSelect(axis int, idx *Tensor) *Tensor {
	a := t.axis("index_select", axis)
	if idx.Dim() != 1 {
		panic(errorf("index_select", "indices must be 1-D, got shape %v", idx.shape))
	}
	sameDevice("index_select", t, idx)
	checkIndices("index_select", idx, t.shape[a], t.shape)
	return t.indexSelect(a, idx)
}

// indexSelect is IndexSelect on a checked axis and 1-D in-range indices.
func (t *Tensor) indexSelect(a int, idx *Tensor) *Tensor {
	src := t.Contiguous()
	idx = idx.Contiguous()
	shape := slices.Clone(t.shape)
	shape[a] = idx.shape[0]
	out := newTensor(t.dev, t.dtype, shape)
	launch(t.dev, kcall{in: tensors(src, idx), out: tensors(out), name: "index_select", dt: t.dtype, shapes: shapesOf(src, idx, out), bytes: bytesOf(idx, out, out)},
		func(b backend.Backend) { b.IndexSelect(out.bv(), src.bv(), idx.bv(), a) })
	in := shapeOf(t.shape)
	return record(out, "index_select", []*Tensor{src, nil}, func(g *Tensor) []*Tensor {
		g = g.Contiguous()
		dx := newTensor(g.dev, g.dtype, in)
		launch(g.dev, kcall{in: tensors(g, idx), out: tensors(dx), name: "index_add", dt: g.dtype, shapes: shapesOf(g, idx, dx), bytes: bytesOf(g, idx, dx)},
			func(b backend.Backend) { b.IndexAdd(dx.bv(), g.bv(), idx.bv(), a) })
		return []*Tensor{dx, nil}
	})
}

// IndexAdd returns a copy of t with the entries of src added at idx (1-D
// int32) along axis, torch.index_add:
//
//	out = t;  out[..., idx[i], ...] += src[..., i, ...]  for i in index order
//
// src has t's shape except len(idx) on axis. Repeated indices accumulate,
// in index order (deterministic: the backend's index_add kernel, no
// atomics). The gradient is g for t and g.IndexSelect(axis, idx) for src.
func (t *Tensor) IndexAdd(axis int, idx, src *Tensor) *Tensor {
	a := t.axis("index_add", axis)
	if idx.Dim() != 1 {
		panic(errorf("index_add", "indices must be 1-D, got shape %v", idx.shape))
	}
	sameDevice("index_add", t, idx, src)
	sameFloat("index_add", t, src)
	want := slices.Clone(t.shape)
	want[a] = idx.shape[0]
	if !slices.Equal(src.shape, want) {
		panic(errorf("index_add", "source %v must be the input %v with %d entries on axis %d (one per index), i.e. %v", src.shape, t.shape, idx.shape[0], a, want))
	}
	checkIndices("index_add", idx, t.shape[a], t.shape)
	return t.Add(src.indexScatter(a, idx, t.shape))
}

// indexScatter is the scatter half of IndexAdd on checked arguments: a
// tensor of shape (zeros but for src's entries added at idx on axis a).
// Its gradient is the matching IndexSelect.
func (t *Tensor) indexScatter(a int, idx *Tensor, shape []int) *Tensor {
	src := t.Contiguous()
	idx = idx.Contiguous()
	out := newTensor(t.dev, t.dtype, shape)
	launch(t.dev, kcall{in: tensors(src, idx), out: tensors(out), name: "index_add", dt: t.dtype, shapes: shapesOf(src, idx, out), bytes: bytesOf(src, idx, out)},
		func(b backend.Backend) { b.IndexAdd(out.bv(), src.bv(), idx.bv(), a) })
	return record(out, "index_add", []*Tensor{src, nil}, func(g *Tensor) []*Tensor {
		return []*Tensor{g.indexSelect(a, idx), nil}
	})
}

// Gather picks along axis: out[..., i, ...] = t[..., idx[..., i, ...], ...]
// (torch.gather). idx has t's shape on every axis but axis; out has idx's
// shape.
func (t *Tensor) Gather(axis int, idx *Tensor) *Tensor {
	a := t.axis("gather", axis)
	if idx.Dim() != t.Dim() {
		panic(errorf("gather", "indices %v must have the rank of the input %v", idx.shape, t.shape))
	}
	for i := range t.shape {
		if i != a && idx.shape[i] != t.shape[i] {
			panic(errorf("gather", "indices %v and input %v differ on axis %d", idx.shape, t.shape, i))
		}
	}
	sameDevice("gather", t, idx)
	checkIndices("gather", idx, t.shape[a], t.shape)
	src := t.Contiguous()
	idx = idx.Contiguous()
	out := newTensor(t.dev, t.dtype, idx.shape)
	launch(t.dev, kcall{in: tensors(src, idx), out: tensors(out), name: "gather", dt: t.dtype, shapes: shapesOf(src, idx, out), bytes: bytesOf(idx, out, out)},
		func(b backend.Backend) { b.Gather(out.bv(), src.bv(), idx.bv(), a) })
	in := shapeOf(t.shape)
	return record(out, "gather", []*Tensor{src, nil}, func(g *Tensor) []*Tensor {
		g = g.Contiguous()
		dx := newTensor(g.dev, g.dtype, in)
		launch(g.dev, kcall{in: tensors(g, idx), out: tensors(dx), name: "scatter_add", dt: g.dtype, shapes: shapesOf(g, idx, dx), bytes: bytesOf(g, idx, dx)},
			func(b backend.Backend) { b.ScatterAdd(dx.bv(), g.bv(), idx.bv(), a) })
		return []*Tensor{dx, nil}
	})
}
