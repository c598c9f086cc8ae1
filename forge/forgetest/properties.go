package forgetest

// Property tests for broadcasting, movement ops, reductions over views and
// the gradients of movement ops, with pgregory.net/rapid.
//
// Every forward property is checked against propArray, a host reference
// written here over plain []float64 with explicit index arithmetic (ravel,
// unravel, one loop per output element); it shares no code with package
// forge. Gradient properties either need no reference (the gradient of
// Sum(x.Permute(p)) is ones, the gradient of a Max splits evenly between
// ties) or use the reference's index map: applying a movement op to an array
// holding each element's own flat index tells, for every output element,
// which input element it came from, so the adjoint is a scatter-add.
//
// Inputs come contiguous or as strided views with an offset into a larger
// buffer whose other elements hold a sentinel, so an op that ignores
// strides or offsets shows up. Values are small multiples of 1/4, so sums,
// products and maxima are exact in float32 as well as float64 and the
// comparisons are exact except for division, powers and means. Float64
// tensors (used where the device has them) also carry arbitrary values
// through the movement ops, which must copy them bit for bit. One property
// uses tensors of 2¹⁵–2¹⁸ elements so the backend's parallel paths run too;
// the To properties use a second device that aliases the first
// (propAliasDevice).
//
// The number of cases per property is rapid's: 100 unless -rapid.checks
// (or RAPID_CHECKS) says otherwise. A case that reaches a kernel the backend
// has not implemented is counted and the property fails naming it.

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"pgregory.net/rapid"
)

// Properties runs the property tests on dev.
func Properties(t *testing.T, dev *forge.Device) {
	s := &propSuite{dev: dev, f64: propHasFloat64(dev)}
	if !s.f64 {
		t.Logf("device %s holds no float64 tensors: properties use float32 only", dev.Name())
	}

	s.check(t, "broadcast_binary", s.propBroadcastBinary)
	s.check(t, "broadcast_where", s.propBroadcastWhere)
	for _, kind := range propMoveKinds {
		s.check(t, kind, func(rt *rapid.T) { s.propMoveOne(rt, kind) })
	}
	s.check(t, "permute_keeps_argument", s.propPermuteKeepsArgument)
	s.check(t, "views_do_not_copy", s.propViewsDoNotCopy)
	s.check(t, "split_all_pieces", s.propSplitAll)
	s.check(t, "chunk_all_pieces", s.propChunkAll)
	s.check(t, "concat", s.propConcat)
	s.check(t, "stack", s.propStack)
	s.check(t, "movement_chains", s.propChains)
	s.check(t, "composition", s.propComposition)
	s.check(t, "reduce", s.propReduce)
	s.check(t, "argmax_argmin", s.propArgExtreme)
	s.check(t, "large_tensors", s.propLarge)

	s.check(t, "grad_sum_permute_is_ones", s.propGradSumPermute)
	s.check(t, "grad_movement_adjoint", s.propGradAdjoint)
	s.check(t, "grad_concat_splits_back", s.propGradConcat)
	s.check(t, "grad_stack_splits_back", s.propGradStack)
	s.check(t, "grad_split_joins_back", s.propGradSplit)
	s.check(t, "grad_expand_sums", s.propGradExpand)
	s.check(t, "grad_reduce_of_view", s.propGradReduce)
	s.check(t, "grad_broadcast_binary", s.propGradBinary)
	s.check(t, "grad_max_splits_ties", s.propGradExtremeTies)
	s.check(t, "grad_accumulates", s.propGradAccumulates)
	s.check(t, "grad_accumulates_onto_set_grad", func(rt *rapid.T) { s.propGradOntoSetGrad(rt, false) })
	s.check(t, "grad_accumulates_onto_broadcast_set_grad", func(rt *rapid.T) { s.propGradOntoSetGrad(rt, true) })
	s.check(t, "grad_reused_leaf", s.propGradReusedLeaf)
	if other, err := propAliasDevice(dev); err != nil {
		t.Errorf("no second device for the To property: %v", err)
	} else {
		s.check(t, "to_other_device", func(rt *rapid.T) { s.propTo(rt, other, 1, 4) })
		s.check(t, "to_other_device_0d", func(rt *rapid.T) { s.propTo(rt, other, 0, 0) })
	}

	t.Logf("Properties on %s: %d properties, %d rapid checks", dev.Name(), s.props, s.checks)
}

// propSuite carries the device under test and counts what ran.
type propSuite struct {
	dev    *forge.Device
	f64    bool // the device holds float64 tensors
	props  int  // properties run
	checks int  // rapid checks run, over all properties
}

// check runs one property as a subtest. A check that reaches a kernel the
// backend has not implemented stops there and is counted; the subtest then
// fails naming the kernels.
func (s *propSuite) check(t *testing.T, name string, prop func(*rapid.T)) {
	t.Run(name, func(t *testing.T) {
		runs, blocked := 0, 0
		missing := map[string]bool{}
		rapid.Check(t, func(rt *rapid.T) {
			runs++
			defer func() {
				if r := recover(); r != nil {
					var nie backend.ErrNotImplemented
					if e, ok := r.(error); ok && errors.As(e, &nie) {
						blocked++
						missing[nie.Error()] = true
						return
					}
					panic(r) // a real failure (or rapid's own control flow)
				}
			}()
			prop(rt)
		})
		s.props++
		s.checks += runs
		if blocked > 0 {
			names := make([]string, 0, len(missing))
			for m := range missing {
				names = append(names, m)
			}
			slices.Sort(names)
			t.Errorf("%d of %d checks could not run: %v", blocked, runs, names)
		}
	})
}

// propAliasDevice returns a second device backed by dev's backend under
// another name ("forgetest-alias-<name>"): forge treats it as a different
// device, so cross-device copies and device-mismatch errors can be tested
// on a machine with one backend.
func propAliasDevice(dev *forge.Device) (*forge.Device, error) {
	name := "forgetest-alias-" + dev.Name()
	b := backendOf(dev)
	backend.Register(name, func() (backend.Backend, error) { return b, nil })
	return forge.OpenDevice(name)
}

// backendOf is the backend dev runs on: the registry's, under the
// device's name (forge.OpenDevice).
func backendOf(dev *forge.Device) backend.Backend {
	b, err := backend.Open(dev.Name())
	if err != nil {
		panic(fmt.Sprintf("forgetest: device %s: %v", dev.Name(), err))
	}
	return b
}

// propHasFloat64 reports whether dev can hold and copy float64 tensors.
func propHasFloat64(dev *forge.Device) bool {
	err := forge.Try(func() {
		x := forge.FromSlice([]float64{1, 2, 3, 4, 5, 6}, 2, 3).To(dev)
		v := x.T().Contiguous().Float64s()
		if !slices.Equal(v, []float64{1, 4, 2, 5, 3, 6}) {
			panic("float64 copy gave wrong values")
		}
	})
	return err == nil
}

// ---------------------------------------------------------------------------
// The host reference

// propArray is a row-major host array: the reference every property
// compares with.
type propArray struct {
	shape []int
	v     []float64
}

func propNumel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func propZeros(shape []int) propArray {
	return propArray{shape: slices.Clone(shape), v: make([]float64, propNumel(shape))}
}

// propIota holds each element's flat index: run through a movement op it
// records where every output element came from.
func propIota(shape []int) propArray {
	a := propZeros(shape)
	for i := range a.v {
		a.v[i] = float64(i)
	}
	return a
}

// propRavel is the flat row-major offset of the multi-index idx.
func propRavel(idx, shape []int) int {
	off := 0
	for k := range shape {
		off = off*shape[k] + idx[k]
	}
	return off
}

// propUnravel is the multi-index of flat offset i.
func propUnravel(i int, shape []int) []int {
	idx := make([]int, len(shape))
	for k := len(shape) - 1; k >= 0; k-- {
		idx[k] = i % shape[k]
		i /= shape[k]
	}
	return idx
}

func (a propArray) at(idx []int) float64 { return a.v[propRavel(idx, a.shape)] }

// build returns an array of shape whose element at idx is f(idx).
// f must not keep idx, which is reused.
func propBuild(shape []int, f func(idx []int) float64) propArray {
	out := propZeros(shape)
	idx := make([]int, len(shape))
	for i := range out.v {
		out.v[i] = f(idx)
		for k := len(idx) - 1; k >= 0; k-- { // odometer: next row-major index
			idx[k]++
			if idx[k] < shape[k] {
				break
			}
			idx[k] = 0
		}
	}
	return out
}

// propBroadcastShape is numpy's rule: align on the right, equal sizes or 1.
func propBroadcastShape(shapes ...[]int) ([]int, bool) {
	n := 0
	for _, s := range shapes {
		n = max(n, len(s))
	}
	out := make([]int, n)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		for k, d := range s {
			o := k + n - len(s)
			switch {
			case d == out[o] || d == 1:
			case out[o] == 1:
				out[o] = d
			default:
				return nil, false
			}
		}
	}
	return out, true
}

// propSource maps an index of a broadcast result to the index of an operand
// of shape: leading axes dropped, size-1 axes pinned to 0.
func propSource(out, shape []int) []int {
	idx := make([]int, len(shape))
	lead := len(out) - len(shape)
	for k, d := range shape {
		if d != 1 {
			idx[k] = out[k+lead]
		}
	}
	return idx
}

func propBinaryRef(a, b propArray, f func(x, y float64) float64) propArray {
	shape, ok := propBroadcastShape(a.shape, b.shape)
	if !ok {
		panic("propBinaryRef: shapes do not broadcast")
	}
	return propBuild(shape, func(idx []int) float64 {
		return f(a.at(propSource(idx, a.shape)), b.at(propSource(idx, b.shape)))
	})
}

func propWhereRef(c, a, b propArray) propArray {
	shape, _ := propBroadcastShape(c.shape, a.shape, b.shape)
	return propBuild(shape, func(idx []int) float64 {
		if c.at(propSource(idx, c.shape)) != 0 {
			return a.at(propSource(idx, a.shape))
		}
		return b.at(propSource(idx, b.shape))
	})
}

func (a propArray) reshape(shape []int) propArray {
	return propArray{shape: slices.Clone(shape), v: slices.Clone(a.v)}
}

// permute: output axis k is input axis p[k].
func (a propArray) permute(p []int) propArray {
	shape := make([]int, len(p))
	for k, q := range p {
		shape[k] = a.shape[q]
	}
	return propBuild(shape, func(idx []int) float64 {
		in := make([]int, len(p))
		for k, q := range p {
			in[q] = idx[k]
		}
		return a.at(in)
	})
}

func (a propArray) narrow(axis, start, length int) propArray {
	shape := slices.Clone(a.shape)
	shape[axis] = length
	return propBuild(shape, func(idx []int) float64 {
		in := slices.Clone(idx)
		in[axis] += start
		return a.at(in)
	})
}

// index selects element i of axis and drops the axis.
func (a propArray) index(axis, i int) propArray {
	shape := slices.Delete(slices.Clone(a.shape), axis, axis+1)
	return propBuild(shape, func(idx []int) float64 {
		return a.at(slices.Insert(slices.Clone(idx), axis, i))
	})
}

// expand broadcasts a to shape (fully resolved).
func (a propArray) expand(shape []int) propArray {
	return propBuild(shape, func(idx []int) float64 { return a.at(propSource(idx, a.shape)) })
}

func propConcatRef(axis int, xs []propArray) propArray {
	shape := slices.Clone(xs[0].shape)
	shape[axis] = 0
	for _, x := range xs {
		shape[axis] += x.shape[axis]
	}
	return propBuild(shape, func(idx []int) float64 {
		i := idx[axis]
		for _, x := range xs {
			if i < x.shape[axis] {
				in := slices.Clone(idx)
				in[axis] = i
				return x.at(in)
			}
			i -= x.shape[axis]
		}
		panic("propConcatRef: index past the end")
	})
}

func propStackRef(axis int, xs []propArray) propArray {
	shape := slices.Insert(slices.Clone(xs[0].shape), axis, len(xs))
	return propBuild(shape, func(idx []int) float64 {
		return xs[idx[axis]].at(slices.Delete(slices.Clone(idx), axis, axis+1))
	})
}

func (a propArray) indexSelect(axis int, sel []int) propArray {
	shape := slices.Clone(a.shape)
	shape[axis] = len(sel)
	return propBuild(shape, func(idx []int) float64 {
		in := slices.Clone(idx)
		in[axis] = sel[idx[axis]]
		return a.at(in)
	})
}

// gather: out[idx] = a[idx with axis replaced by ix[idx]] (torch.gather).
func (a propArray) gather(axis int, ix propArray) propArray {
	return propBuild(ix.shape, func(idx []int) float64 {
		in := slices.Clone(idx)
		in[axis] = int(ix.at(idx))
		return a.at(in)
	})
}

// reduce applies kind ("sum", "max", "min", "mean") over axes (normalised;
// none means all), keeping them with size 1 if keep.
func (a propArray) reduce(kind string, axes []int, keep bool) propArray {
	red := make([]bool, len(a.shape))
	for _, ax := range axes {
		red[ax] = true
	}
	if len(axes) == 0 {
		for k := range red {
			red[k] = true
		}
	}
	var shape []int // output shape with keep
	var outShape []int
	for k, d := range a.shape {
		if red[k] {
			shape = append(shape, 1)
			if keep {
				outShape = append(outShape, 1)
			}
		} else {
			shape = append(shape, d)
			outShape = append(outShape, d)
		}
	}
	acc := make([]float64, propNumel(shape))
	cnt := make([]int, len(acc))
	for i, x := range a.v {
		idx := propUnravel(i, a.shape)
		for k := range idx {
			if red[k] {
				idx[k] = 0
			}
		}
		o := propRavel(idx, shape)
		switch {
		case cnt[o] == 0:
			acc[o] = x
		case kind == "max":
			acc[o] = math.Max(acc[o], x)
		case kind == "min":
			acc[o] = math.Min(acc[o], x)
		default:
			acc[o] += x
		}
		cnt[o]++
	}
	if kind == "mean" {
		for o := range acc {
			acc[o] /= float64(cnt[o])
		}
	}
	return propArray{shape: slices.Clone(outShape), v: acc}
}

// arg returns the index of the first maximum ("argmax") or minimum along
// axis, dropping it.
func (a propArray) arg(kind string, axis int) propArray {
	shape := slices.Delete(slices.Clone(a.shape), axis, axis+1)
	return propBuild(shape, func(idx []int) float64 {
		best := 0
		in := slices.Insert(slices.Clone(idx), axis, 0)
		bv := a.at(in)
		for i := 1; i < a.shape[axis]; i++ {
			in[axis] = i
			x := a.at(in)
			if (kind == "argmax" && x > bv) || (kind == "argmin" && x < bv) {
				best, bv = i, x
			}
		}
		return float64(best)
	})
}

// sumTo sums a broadcast-shaped array back to shape (the adjoint of
// broadcasting).
func (a propArray) sumTo(shape []int) propArray {
	out := propZeros(shape)
	for i, x := range a.v {
		out.v[propRavel(propSource(propUnravel(i, a.shape), shape), shape)] += x
	}
	return out
}

// adjoint scatters w back through the index map src (an op applied to
// propIota(shape)): the gradient of Sum(op(x)·w) with respect to x.
func propAdjoint(shape []int, src, w propArray) propArray {
	g := propZeros(shape)
	for j, i := range src.v {
		g.v[int(i)] += w.v[j]
	}
	return g
}

// ---------------------------------------------------------------------------
// Tensors and comparison

// tensor makes a contiguous leaf tensor of dtype dt on the device holding a.
func (s *propSuite) tensor(a propArray, dt forge.DType) *forge.Tensor {
	var x *forge.Tensor
	shape := a.shape
	if len(shape) == 0 {
		shape = []int{1} // FromSlice makes 1-D tensors; reshape to 0-d below
	}
	switch dt {
	case forge.Float64:
		x = forge.FromSlice(slices.Clone(a.v), shape...)
	case forge.Float32:
		f := make([]float32, len(a.v))
		for i, v := range a.v {
			f[i] = float32(v)
		}
		x = forge.FromSlice(f, shape...)
	case forge.Int32:
		n := make([]int32, len(a.v))
		for i, v := range a.v {
			n[i] = int32(v)
		}
		x = forge.FromSlice(n, shape...)
	default:
		panic(fmt.Sprintf("forgetest: no tensors of dtype %v", dt))
	}
	// Move first, then reshape: To goes through FromSlice, which has no
	// 0-d form.
	x = x.To(s.dev)
	if len(a.shape) == 0 {
		x = x.Reshape()
	}
	return x
}

// input makes a tensor holding a that is, at rapid's choice, contiguous or a
// strided view with an offset into a larger buffer (a narrowed window
// surrounded by sentinel values, its axes permuted in memory). Ops must
// give the same results for all of them.
func (s *propSuite) input(t *rapid.T, label string, a propArray, dt forge.DType) *forge.Tensor {
	n := len(a.shape)
	if n == 0 {
		return s.tensor(a, dt)
	}
	layout := rapid.SampledFrom([]string{"contiguous", "narrowed", "permuted", "both"}).Draw(t, label+"_layout")
	// Memory order: b = a.permute(p), viewed back with the inverse.
	p := make([]int, n)
	for k := range p {
		p[k] = k
	}
	if layout == "permuted" || layout == "both" {
		p = rapid.Permutation(p).Draw(t, label+"_perm")
	}
	b := a.permute(p)
	inv := make([]int, n)
	for k, q := range p {
		inv[q] = k
	}
	var x *forge.Tensor
	if layout == "narrowed" || layout == "both" {
		ax := rapid.IntRange(0, n-1).Draw(t, label+"_pad_axis")
		lo := rapid.IntRange(0, 2).Draw(t, label+"_pad_lo")
		hi := rapid.IntRange(0, 2).Draw(t, label+"_pad_hi")
		shape := slices.Clone(b.shape)
		shape[ax] += lo + hi
		const sentinel = -9999.75 // never a legal value in these properties
		padded := propBuild(shape, func(idx []int) float64 {
			if idx[ax] < lo || idx[ax] >= lo+b.shape[ax] {
				return sentinel
			}
			in := slices.Clone(idx)
			in[ax] -= lo
			return b.at(in)
		})
		x = s.tensor(padded, dt).Narrow(ax, lo, b.shape[ax])
	} else {
		x = s.tensor(b, dt)
	}
	return x.Permute(inv...)
}

// dtype draws a dtype: float32 or (where the device has it) float64, and
// int32 too when ints is set.
func (s *propSuite) dtype(t *rapid.T, ints bool) forge.DType {
	dts := []forge.DType{forge.Float32}
	if s.f64 {
		dts = append(dts, forge.Float64)
	}
	if ints {
		dts = append(dts, forge.Int32)
	}
	return rapid.SampledFrom(dts).Draw(t, "dtype")
}

// values draws an array of shape: multiples of 1/4 in [-3, 3] (integers in
// [-12, 12] for int32), or for float64 with arbitrary set, any finite
// values.
func (s *propSuite) values(t *rapid.T, label string, shape []int, dt forge.DType, arbitrary bool) propArray {
	n := propNumel(shape)
	a := propZeros(shape)
	switch {
	case dt == forge.Int32:
		for i, k := range rapid.SliceOfN(rapid.IntRange(-12, 12), n, n).Draw(t, label) {
			a.v[i] = float64(k)
		}
	case dt == forge.Float64 && arbitrary:
		copy(a.v, rapid.SliceOfN(rapid.Float64Range(-1e6, 1e6), n, n).Draw(t, label))
	default:
		for i, k := range rapid.SliceOfN(rapid.IntRange(-12, 12), n, n).Draw(t, label) {
			a.v[i] = float64(k) / 4
		}
	}
	return a
}

func propShape(t *rapid.T, label string, minRank, maxRank int) []int {
	return rapid.SliceOfN(rapid.IntRange(1, 5), minRank, maxRank).Draw(t, label)
}

// propOperand draws a shape that broadcasts to out: some leading axes
// dropped, some axes set to 1.
func propOperand(t *rapid.T, label string, out []int) []int {
	n := rapid.IntRange(0, len(out)).Draw(t, label+"_rank")
	s := slices.Clone(out[len(out)-n:])
	ones := rapid.SliceOfN(rapid.Bool(), n, n).Draw(t, label+"_ones")
	for k := range s {
		if ones[k] {
			s[k] = 1
		}
	}
	return s
}

// propAxisArg writes axis (in [0, n)) as itself or as its negative alias.
func propAxisArg(t *rapid.T, label string, axis, n int) int {
	if rapid.Bool().Draw(t, label+"_negative") {
		return axis - n
	}
	return axis
}

// expect compares got with want: shape exactly, values exactly (NaN equals
// NaN) or within tol·(1+|want|).
func propExpect(t *rapid.T, what string, got *forge.Tensor, want propArray, tol float64) {
	t.Helper()
	if !slices.Equal(got.Shape(), want.shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape(), want.shape)
	}
	v := got.Float64s()
	if len(v) != len(want.v) {
		t.Fatalf("%s: %d values for shape %v, want %d", what, len(v), want.shape, len(want.v))
	}
	for i := range v {
		w := want.v[i]
		ok := v[i] == w || (math.IsNaN(v[i]) && math.IsNaN(w))
		if !ok && tol > 0 {
			ok = math.Abs(v[i]-w) <= tol*(1+math.Abs(w))
		}
		if !ok {
			t.Fatalf("%s: element %v (flat %d) is %v, want %v\n got %v\nwant %v",
				what, propUnravel(i, want.shape), i, v[i], w, propShort(v), propShort(want.v))
		}
	}
}

func propShort(v []float64) string {
	if len(v) > 40 {
		return fmt.Sprintf("%v … (%d values)", v[:40], len(v))
	}
	return fmt.Sprint(v)
}

// propTol is the tolerance for results that are rounded (division, powers,
// means): a few ulps of the dtype.
func propTol(dt forge.DType) float64 {
	if dt == forge.Float64 {
		return 1e-13
	}
	return 2e-6
}

// ---------------------------------------------------------------------------
// Broadcasting

type propBinOp struct {
	name string
	op   func(a, b *forge.Tensor) *forge.Tensor
	ref  func(x, y float64) float64
}

func propBool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var propBinOps = []propBinOp{
	{"add", (*forge.Tensor).Add, func(x, y float64) float64 { return x + y }},
	{"sub", (*forge.Tensor).Sub, func(x, y float64) float64 { return x - y }},
	{"mul", (*forge.Tensor).Mul, func(x, y float64) float64 { return x * y }},
	{"div", (*forge.Tensor).Div, func(x, y float64) float64 { return x / y }},
	{"pow", (*forge.Tensor).Pow, math.Pow},
	{"maximum", (*forge.Tensor).Maximum, math.Max},
	{"minimum", (*forge.Tensor).Minimum, math.Min},
	{"eq", (*forge.Tensor).Eq, func(x, y float64) float64 { return propBool(x == y) }},
	{"ne", (*forge.Tensor).Ne, func(x, y float64) float64 { return propBool(x != y) }},
	{"lt", (*forge.Tensor).Lt, func(x, y float64) float64 { return propBool(x < y) }},
	{"le", (*forge.Tensor).Le, func(x, y float64) float64 { return propBool(x <= y) }},
	{"gt", (*forge.Tensor).Gt, func(x, y float64) float64 { return propBool(x > y) }},
	{"ge", (*forge.Tensor).Ge, func(x, y float64) float64 { return propBool(x >= y) }},
}

// propBroadcastBinary: every binary op on a random broadcast-compatible
// pair of shapes (rank 0–4, dims 1–5), strided or not, matches numpy's
// rule computed on the host.
func (s *propSuite) propBroadcastBinary(t *rapid.T) {
	op := rapid.SampledFrom(propBinOps).Draw(t, "op")
	out := propShape(t, "out", 0, 4)
	as, bs := propOperand(t, "a", out), propOperand(t, "b", out)
	dt := s.dtype(t, false)
	a, b := s.values(t, "a", as, dt, false), s.values(t, "b", bs, dt, false)
	tol := 0.0
	switch op.name {
	case "div":
		for i, y := range b.v {
			if y == 0 {
				b.v[i] = 0.75
			}
		}
		tol = propTol(dt)
	case "pow": // positive bases, integer exponents in [-3, 3]
		for i, x := range a.v {
			a.v[i] = math.Abs(x) + 0.25
		}
		for i, y := range b.v {
			b.v[i] = math.Trunc(y)
		}
		tol = 10 * propTol(dt)
	}
	got := op.op(s.input(t, "a", a, dt), s.input(t, "b", b, dt))
	if got.DType() != dt {
		t.Fatalf("%s: dtype %v, want %v", op.name, got.DType(), dt)
	}
	propExpect(t, fmt.Sprintf("%s(%v, %v)", op.name, as, bs), got, propBinaryRef(a, b, op.ref), tol)
}

// propBroadcastWhere: Where broadcasts condition and both branches
// together; the condition may be int32.
func (s *propSuite) propBroadcastWhere(t *rapid.T) {
	out := propShape(t, "out", 0, 4)
	cs, as, bs := propOperand(t, "cond", out), propOperand(t, "a", out), propOperand(t, "b", out)
	dt := s.dtype(t, false)
	cdt := rapid.SampledFrom([]forge.DType{dt, forge.Int32}).Draw(t, "cond_dtype")
	c := propZeros(cs)
	for i, k := range rapid.SliceOfN(rapid.IntRange(-1, 2), len(c.v), len(c.v)).Draw(t, "cond") {
		c.v[i] = float64(k)
	}
	a, b := s.values(t, "a", as, dt, false), s.values(t, "b", bs, dt, false)
	got := forge.Where(s.input(t, "cond", c, cdt), s.input(t, "a", a, dt), s.input(t, "b", b, dt))
	propExpect(t, fmt.Sprintf("Where(%v, %v, %v)", cs, as, bs), got, propWhereRef(c, a, b), 0)
}

// ---------------------------------------------------------------------------
// Movement ops

// propMove is one drawn movement op with its host reference.
type propMove struct {
	desc  string
	apply func(x *forge.Tensor) *forge.Tensor
	ref   func(a propArray) propArray
}

var propMoveKinds = []string{
	"reshape", "flatten", "unsqueeze", "squeeze", "permute", "transpose", "t",
	"narrow", "slice", "index", "expand", "contiguous", "clone",
	"index_select", "gather", "split", "chunk",
}

// propKindOK reports whether kind applies to a tensor of rank n and dtype dt.
func propKindOK(kind string, n int, dt forge.DType) bool {
	switch kind {
	case "index_select", "gather":
		if dt == forge.Int32 {
			return false
		}
	}
	switch kind {
	case "reshape", "flatten", "unsqueeze", "squeeze", "permute", "t", "contiguous", "clone", "expand":
		return true
	}
	return n >= 1
}

// drawMove draws a movement op of kind for a tensor of shape. In a chain,
// every output axis keeps at least one element; otherwise empty results
// (Slice past the end, zero-size Split pieces) are allowed.
func (s *propSuite) drawMove(t *rapid.T, kind string, shape []int, chain bool) propMove {
	n := len(shape)
	switch kind {
	case "reshape":
		target := propFactorShape(t, propNumel(shape))
		arg := slices.Clone(target)
		if len(arg) > 0 && rapid.Bool().Draw(t, "infer") {
			arg[rapid.IntRange(0, len(arg)-1).Draw(t, "infer_axis")] = -1
		}
		return propMove{fmt.Sprintf("Reshape(%v)", arg),
			func(x *forge.Tensor) *forge.Tensor { return x.Reshape(arg...) },
			func(a propArray) propArray { return a.reshape(target) }}

	case "flatten":
		if n == 0 {
			return propMove{"Flatten(0, 0)",
				func(x *forge.Tensor) *forge.Tensor { return x.Flatten(0, 0) },
				func(a propArray) propArray { return a.reshape([]int{1}) }}
		}
		st := rapid.IntRange(0, n-1).Draw(t, "start")
		en := rapid.IntRange(st, n-1).Draw(t, "end")
		sa, ea := propAxisArg(t, "start", st, n), propAxisArg(t, "end", en, n)
		target := slices.Concat(shape[:st], []int{propNumel(shape[st : en+1])}, shape[en+1:])
		return propMove{fmt.Sprintf("Flatten(%d, %d)", sa, ea),
			func(x *forge.Tensor) *forge.Tensor { return x.Flatten(sa, ea) },
			func(a propArray) propArray { return a.reshape(target) }}

	case "unsqueeze":
		ax := rapid.IntRange(0, n).Draw(t, "axis")
		arg := ax
		if rapid.Bool().Draw(t, "negative") {
			arg = ax - n - 1
		}
		target := slices.Insert(slices.Clone(shape), ax, 1)
		return propMove{fmt.Sprintf("Unsqueeze(%d)", arg),
			func(x *forge.Tensor) *forge.Tensor { return x.Unsqueeze(arg) },
			func(a propArray) propArray { return a.reshape(target) }}

	case "squeeze":
		var ones []int
		for k, d := range shape {
			if d == 1 {
				ones = append(ones, k)
			}
		}
		var args []int
		drop := ones // no arguments: every size-1 axis
		if len(ones) > 0 && rapid.Bool().Draw(t, "some") {
			pick := rapid.SliceOfN(rapid.Bool(), len(ones), len(ones)).Draw(t, "pick")
			var sel []int
			for i, k := range ones {
				if pick[i] {
					sel = append(sel, k)
					args = append(args, propAxisArg(t, "axis", k, n))
				}
			}
			if len(sel) > 0 {
				drop = sel
			}
		}
		var target []int
		for k, d := range shape {
			if !slices.Contains(drop, k) {
				target = append(target, d)
			}
		}
		return propMove{fmt.Sprintf("Squeeze(%v)", args),
			func(x *forge.Tensor) *forge.Tensor { return x.Squeeze(slices.Clone(args)...) },
			func(a propArray) propArray { return a.reshape(target) }}

	case "permute":
		p := rapid.Permutation(propRange(n)).Draw(t, "perm")
		arg := make([]int, n)
		for k, q := range p {
			arg[k] = propAxisArg(t, "perm", q, n)
		}
		return propMove{fmt.Sprintf("Permute(%v)", arg),
			func(x *forge.Tensor) *forge.Tensor { return x.Permute(slices.Clone(arg)...) },
			func(a propArray) propArray { return a.permute(p) }}

	case "transpose":
		i, j := rapid.IntRange(0, n-1).Draw(t, "a"), rapid.IntRange(0, n-1).Draw(t, "b")
		ia, ja := propAxisArg(t, "a", i, n), propAxisArg(t, "b", j, n)
		p := propRange(n)
		p[i], p[j] = p[j], p[i]
		return propMove{fmt.Sprintf("Transpose(%d, %d)", ia, ja),
			func(x *forge.Tensor) *forge.Tensor { return x.Transpose(ia, ja) },
			func(a propArray) propArray { return a.permute(p) }}

	case "t":
		p := propRange(n)
		if n >= 2 {
			p[n-2], p[n-1] = p[n-1], p[n-2]
		}
		return propMove{"T()",
			func(x *forge.Tensor) *forge.Tensor { return x.T() },
			func(a propArray) propArray { return a.permute(p) }}

	case "narrow":
		ax := rapid.IntRange(0, n-1).Draw(t, "axis")
		l := shape[ax]
		minLen := 1
		if !chain {
			minLen = 0
		}
		st := rapid.IntRange(0, l-minLen).Draw(t, "start")
		ln := rapid.IntRange(minLen, l-st).Draw(t, "length")
		sarg := st
		if st < l && rapid.Bool().Draw(t, "negative_start") {
			sarg = st - l
		}
		aarg := propAxisArg(t, "axis", ax, n)
		return propMove{fmt.Sprintf("Narrow(%d, %d, %d)", aarg, sarg, ln),
			func(x *forge.Tensor) *forge.Tensor { return x.Narrow(aarg, sarg, ln) },
			func(a propArray) propArray { return a.narrow(ax, st, ln) }}

	case "slice":
		ax := rapid.IntRange(0, n-1).Draw(t, "axis")
		l := shape[ax]
		var sarg, earg int
		if chain {
			st := rapid.IntRange(0, l-1).Draw(t, "start")
			en := rapid.IntRange(st+1, l).Draw(t, "end")
			sarg, earg = st, en
			switch rapid.IntRange(0, 2).Draw(t, "start_form") {
			case 1:
				sarg = st - l
			case 2:
				if st == 0 {
					sarg = -l - rapid.IntRange(1, 3).Draw(t, "start_under")
				}
			}
			switch rapid.IntRange(0, 2).Draw(t, "end_form") {
			case 1:
				if en < l {
					earg = en - l
				}
			case 2:
				if en == l {
					earg = l + rapid.IntRange(1, 3).Draw(t, "end_over")
				}
			}
		} else {
			sarg = rapid.IntRange(-l-3, l+3).Draw(t, "start")
			earg = rapid.IntRange(-l-3, l+3).Draw(t, "end")
		}
		// Python's rules for a[start:end], written out.
		clip := func(i int) int {
			if i < 0 {
				i += l
				if i < 0 {
					i = 0
				}
			}
			if i > l {
				i = l
			}
			return i
		}
		st, en := clip(sarg), clip(earg)
		ln := max(en-st, 0)
		aarg := propAxisArg(t, "axis", ax, n)
		return propMove{fmt.Sprintf("Slice(%d, %d, %d)", aarg, sarg, earg),
			func(x *forge.Tensor) *forge.Tensor { return x.Slice(aarg, sarg, earg) },
			func(a propArray) propArray { return a.narrow(ax, st, ln) }}

	case "index":
		ax := rapid.IntRange(0, n-1).Draw(t, "axis")
		i := rapid.IntRange(0, shape[ax]-1).Draw(t, "i")
		iarg := i
		if rapid.Bool().Draw(t, "negative_i") {
			iarg = i - shape[ax]
		}
		aarg := propAxisArg(t, "axis", ax, n)
		return propMove{fmt.Sprintf("Index(%d, %d)", aarg, iarg),
			func(x *forge.Tensor) *forge.Tensor { return x.Index(aarg, iarg) },
			func(a propArray) propArray { return a.index(ax, i) }}

	case "expand":
		lead := rapid.SliceOfN(rapid.IntRange(1, 3), 0, max(0, 4-n)).Draw(t, "new_axes")
		target := slices.Clone(lead)
		arg := slices.Clone(lead)
		for _, d := range shape {
			size := d
			if d == 1 {
				size = rapid.IntRange(1, 4).Draw(t, "stretch")
			}
			target = append(target, size)
			if size == d && rapid.Bool().Draw(t, "keep_with_minus_one") {
				arg = append(arg, -1)
			} else {
				arg = append(arg, size)
			}
		}
		return propMove{fmt.Sprintf("Expand(%v)", arg),
			func(x *forge.Tensor) *forge.Tensor { return x.Expand(slices.Clone(arg)...) },
			func(a propArray) propArray { return a.expand(target) }}

	case "contiguous":
		return propMove{"Contiguous()",
			func(x *forge.Tensor) *forge.Tensor { return x.Contiguous() },
			func(a propArray) propArray { return a }}

	case "clone":
		return propMove{"Clone()",
			func(x *forge.Tensor) *forge.Tensor { return x.Clone() },
			func(a propArray) propArray { return a }}

	case "index_select":
		ax := rapid.IntRange(0, n-1).Draw(t, "axis")
		sel := rapid.SliceOfN(rapid.IntRange(0, shape[ax]-1), 1, 6).Draw(t, "indices")
		aarg := propAxisArg(t, "axis", ax, n)
		return propMove{fmt.Sprintf("IndexSelect(%d, %v)", aarg, sel),
			func(x *forge.Tensor) *forge.Tensor {
				ids := propArray{shape: []int{len(sel)}, v: propFloats(sel)}
				return x.IndexSelect(aarg, s.tensor(ids, forge.Int32))
			},
			func(a propArray) propArray { return a.indexSelect(ax, sel) }}

	case "gather":
		ax := rapid.IntRange(0, n-1).Draw(t, "axis")
		ishape := slices.Clone(shape)
		ishape[ax] = rapid.IntRange(1, 5).Draw(t, "indices_len")
		ix := propZeros(ishape)
		copy(ix.v, propFloats(rapid.SliceOfN(rapid.IntRange(0, shape[ax]-1), len(ix.v), len(ix.v)).Draw(t, "indices")))
		aarg := propAxisArg(t, "axis", ax, n)
		return propMove{fmt.Sprintf("Gather(%d, %v %v)", aarg, ix.shape, ix.v),
			func(x *forge.Tensor) *forge.Tensor { return x.Gather(aarg, s.tensor(ix, forge.Int32)) },
			func(a propArray) propArray { return a.gather(ax, ix) }}

	case "split":
		ax := rapid.IntRange(0, n-1).Draw(t, "axis")
		sizes := propSizes(t, shape[ax])
		j := propPiece(t, sizes, chain)
		off := propSum(sizes[:j])
		aarg := propAxisArg(t, "axis", ax, n)
		return propMove{fmt.Sprintf("Split(%d, %v)[%d]", aarg, sizes, j),
			func(x *forge.Tensor) *forge.Tensor { return x.Split(aarg, slices.Clone(sizes)...)[j] },
			func(a propArray) propArray { return a.narrow(ax, off, sizes[j]) }}

	case "chunk":
		ax := rapid.IntRange(0, n-1).Draw(t, "axis")
		cnt := rapid.IntRange(1, 6).Draw(t, "chunks")
		sizes := propChunkSizes(shape[ax], cnt)
		j := rapid.IntRange(0, len(sizes)-1).Draw(t, "piece")
		off := propSum(sizes[:j])
		aarg := propAxisArg(t, "axis", ax, n)
		return propMove{fmt.Sprintf("Chunk(%d, %d)[%d]", cnt, aarg, j),
			func(x *forge.Tensor) *forge.Tensor { return x.Chunk(cnt, aarg)[j] },
			func(a propArray) propArray { return a.narrow(ax, off, sizes[j]) }}
	}
	panic("forgetest: unknown movement kind " + kind)
}

func propRange(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

func propFloats(v []int) []float64 {
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	return f
}

func propSum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

// propSizes draws 1–4 non-negative sizes summing to l.
func propSizes(t *rapid.T, l int) []int {
	k := rapid.IntRange(1, 4).Draw(t, "pieces")
	cuts := rapid.SliceOfN(rapid.IntRange(0, l), k-1, k-1).Draw(t, "cuts")
	slices.Sort(cuts)
	sizes := make([]int, k)
	prev := 0
	for i, c := range cuts {
		sizes[i] = c - prev
		prev = c
	}
	sizes[k-1] = l - prev
	return sizes
}

// propPiece draws a piece of sizes; in a chain, a non-empty one.
func propPiece(t *rapid.T, sizes []int, chain bool) int {
	var ok []int
	for j, sz := range sizes {
		if sz > 0 || !chain {
			ok = append(ok, j)
		}
	}
	return rapid.SampledFrom(ok).Draw(t, "piece")
}

// propChunkSizes is torch.chunk's split of l into at most n pieces:
// ⌈l/n⌉ each, the last one smaller.
func propChunkSizes(l, n int) []int {
	size := (l + n - 1) / n
	var sizes []int
	for off := 0; off < l; off += size {
		sizes = append(sizes, min(size, l-off))
	}
	return sizes
}

// propFactorShape draws a shape of rank 0–4 holding n elements (n ≥ 1).
func propFactorShape(t *rapid.T, n int) []int {
	rank := rapid.IntRange(0, 4).Draw(t, "new_rank")
	if n > 1 && rank == 0 {
		rank = 1
	}
	shape := make([]int, rank)
	for i := range shape {
		shape[i] = 1
	}
	for f := 2; n > 1; {
		if n%f != 0 {
			f++
			continue
		}
		shape[rapid.IntRange(0, rank-1).Draw(t, "factor_axis")] *= f
		n /= f
	}
	return shape
}

// propMoveOne: one movement op of kind on a random (possibly strided)
// input of any dtype it supports.
func (s *propSuite) propMoveOne(t *rapid.T, kind string) {
	shape := propShape(t, "shape", 0, 4)
	dt := s.dtype(t, kind != "index_select" && kind != "gather")
	if !propKindOK(kind, len(shape), dt) {
		shape = propShape(t, "shape_ranked", 1, 3)
	}
	a := s.values(t, "x", shape, dt, true)
	x := s.input(t, "x", a, dt)
	m := s.drawMove(t, kind, shape, false)
	got := m.apply(x)
	if got.DType() != dt {
		t.Fatalf("%s: dtype %v, want %v", m.desc, got.DType(), dt)
	}
	propExpect(t, fmt.Sprintf("%v.%s", shape, m.desc), got, m.ref(a), 0)
	if kind == "contiguous" && !got.IsContiguous() {
		t.Fatalf("Contiguous() of %v (strides %v) is not contiguous: strides %v", shape, x.Strides(), got.Strides())
	}
	// The input must be untouched.
	propExpect(t, "input after "+m.desc, x, a, 0)
}

// propPermuteKeepsArgument: Permute must not modify the caller's slice
// (negative axes included).
func (s *propSuite) propPermuteKeepsArgument(t *rapid.T) {
	shape := propShape(t, "shape", 1, 4)
	n := len(shape)
	p := rapid.Permutation(propRange(n)).Draw(t, "perm")
	arg := make([]int, n)
	for k, q := range p {
		arg[k] = propAxisArg(t, "perm", q, n)
	}
	before := slices.Clone(arg)
	s.tensor(propZeros(shape), forge.Float32).Permute(arg...)
	if !slices.Equal(arg, before) {
		t.Fatalf("Permute(%v) changed its argument to %v", before, arg)
	}
}

// propViewsDoNotCopy: Permute, Transpose, Narrow, Index and Expand are
// views: their strides are the input's, rearranged (0 on stretched axes),
// whatever the input's layout. Strides of size-1 axes are not compared
// (they address nothing).
func (s *propSuite) propViewsDoNotCopy(t *rapid.T) {
	shape := propShape(t, "shape", 1, 4)
	n := len(shape)
	x := s.input(t, "x", propIota(shape), forge.Float32)
	st := x.Strides()
	same := func(shape, got, want []int) bool {
		for k, d := range shape {
			if d > 1 && got[k] != want[k] {
				return false
			}
		}
		return true
	}
	p := rapid.Permutation(propRange(n)).Draw(t, "perm")
	want := make([]int, n)
	for k, q := range p {
		want[k] = st[q]
	}
	if y := x.Permute(p...); !same(y.Shape(), y.Strides(), want) {
		t.Fatalf("%v.Permute(%v) of strides %v gave strides %v, want %v", shape, p, st, y.Strides(), want)
	}
	i, j := rapid.IntRange(0, n-1).Draw(t, "a"), rapid.IntRange(0, n-1).Draw(t, "b")
	want = slices.Clone(st)
	want[i], want[j] = want[j], want[i]
	if y := x.Transpose(i, j); !same(y.Shape(), y.Strides(), want) {
		t.Fatalf("%v.Transpose(%d, %d) of strides %v gave strides %v, want %v", shape, i, j, st, y.Strides(), want)
	}
	ax := rapid.IntRange(0, n-1).Draw(t, "axis")
	if z := x.Narrow(ax, 0, 1); !same(z.Shape(), z.Strides(), st) {
		t.Fatalf("%v.Narrow(%d, 0, 1) of strides %v gave strides %v", shape, ax, st, z.Strides())
	}
	want = slices.Delete(slices.Clone(st), ax, ax+1)
	if z := x.Index(ax, 0); !same(z.Shape(), z.Strides(), want) {
		t.Fatalf("%v.Index(%d, 0) of strides %v gave strides %v, want %v (Index is documented as a view)", shape, ax, st, z.Strides(), want)
	}
	one := x.Narrow(ax, 0, 1)
	target := slices.Clone(shape)
	target[ax] = rapid.IntRange(2, 4).Draw(t, "stretch")
	want = slices.Clone(st)
	want[ax] = 0
	if e := one.Expand(target...); !same(e.Shape(), e.Strides(), want) {
		t.Fatalf("%v.Expand(%v) of strides %v gave strides %v, want %v", one.Shape(), target, st, e.Strides(), want)
	}
}

// propSplitAll: Split returns one piece per size, each the right window.
func (s *propSuite) propSplitAll(t *rapid.T) {
	shape := propShape(t, "shape", 1, 4)
	dt := s.dtype(t, true)
	a := s.values(t, "x", shape, dt, true)
	x := s.input(t, "x", a, dt)
	ax := rapid.IntRange(0, len(shape)-1).Draw(t, "axis")
	sizes := propSizes(t, shape[ax])
	aarg := propAxisArg(t, "axis", ax, len(shape))
	pieces := x.Split(aarg, sizes...)
	if len(pieces) != len(sizes) {
		t.Fatalf("Split(%d, %v) of %v gave %d pieces", aarg, sizes, shape, len(pieces))
	}
	off := 0
	for j, p := range pieces {
		propExpect(t, fmt.Sprintf("Split(%d, %v)[%d] of %v", aarg, sizes, j, shape), p, a.narrow(ax, off, sizes[j]), 0)
		off += sizes[j]
	}
}

// propChunkAll: Chunk gives ⌈l/⌈l/n⌉⌉ pieces of ⌈l/n⌉, the last smaller.
func (s *propSuite) propChunkAll(t *rapid.T) {
	shape := propShape(t, "shape", 1, 4)
	dt := s.dtype(t, true)
	a := s.values(t, "x", shape, dt, true)
	x := s.input(t, "x", a, dt)
	ax := rapid.IntRange(0, len(shape)-1).Draw(t, "axis")
	cnt := rapid.IntRange(1, 7).Draw(t, "chunks")
	aarg := propAxisArg(t, "axis", ax, len(shape))
	sizes := propChunkSizes(shape[ax], cnt)
	pieces := x.Chunk(cnt, aarg)
	if len(pieces) != len(sizes) {
		t.Fatalf("Chunk(%d, %d) of %v gave %d pieces, want %d (sizes %v)", cnt, aarg, shape, len(pieces), len(sizes), sizes)
	}
	off := 0
	for j, p := range pieces {
		propExpect(t, fmt.Sprintf("Chunk(%d, %d)[%d] of %v", cnt, aarg, j, shape), p, a.narrow(ax, off, sizes[j]), 0)
		off += sizes[j]
	}
}

// propConcat: Concat of 1–4 (possibly strided) tensors along any axis.
func (s *propSuite) propConcat(t *rapid.T) {
	base := propShape(t, "shape", 1, 4)
	n := len(base)
	ax := rapid.IntRange(0, n-1).Draw(t, "axis")
	k := rapid.IntRange(1, 4).Draw(t, "count")
	dt := s.dtype(t, true)
	var arrs []propArray
	var ts []*forge.Tensor
	var shapes [][]int
	for i := 0; i < k; i++ {
		sh := slices.Clone(base)
		sh[ax] = rapid.IntRange(0, 5).Draw(t, "len") // empty pieces too
		a := s.values(t, "x", sh, dt, true)
		arrs = append(arrs, a)
		ts = append(ts, s.input(t, "x", a, dt))
		shapes = append(shapes, sh)
	}
	aarg := propAxisArg(t, "axis", ax, n)
	got := forge.Concat(aarg, ts...)
	propExpect(t, fmt.Sprintf("Concat(%d, %v)", aarg, shapes), got, propConcatRef(ax, arrs), 0)
}

// propStack: Stack of 1–4 tensors of one shape along a new axis.
func (s *propSuite) propStack(t *rapid.T) {
	shape := propShape(t, "shape", 0, 3)
	n := len(shape)
	ax := rapid.IntRange(0, n).Draw(t, "axis")
	aarg := ax
	if rapid.Bool().Draw(t, "negative") {
		aarg = ax - n - 1
	}
	k := rapid.IntRange(1, 4).Draw(t, "count")
	dt := s.dtype(t, true)
	var arrs []propArray
	var ts []*forge.Tensor
	for i := 0; i < k; i++ {
		a := s.values(t, "x", shape, dt, true)
		arrs = append(arrs, a)
		ts = append(ts, s.input(t, "x", a, dt))
	}
	got := forge.Stack(aarg, ts...)
	propExpect(t, fmt.Sprintf("Stack(%d, %d × %v)", aarg, k, shape), got, propStackRef(ax, arrs), 0)
}

// propChains: 1–4 random movement ops in a row on a random input.
func (s *propSuite) propChains(t *rapid.T) {
	shape := propShape(t, "shape", 0, 4)
	dt := s.dtype(t, true)
	a := s.values(t, "x", shape, dt, true)
	x := s.input(t, "x", a, dt)
	steps := rapid.IntRange(1, 4).Draw(t, "steps")
	desc := fmt.Sprint(shape)
	for i := 0; i < steps; i++ {
		var ok []string
		for _, k := range propMoveKinds {
			if propKindOK(k, len(a.shape), dt) {
				ok = append(ok, k)
			}
		}
		m := s.drawMove(t, rapid.SampledFrom(ok).Draw(t, "kind"), a.shape, true)
		x, a = m.apply(x), m.ref(a)
		desc += "." + m.desc
		propExpect(t, desc, x, a, 0)
	}
}

// propComposition: permute, then reshape, then slice; the non-contiguous
// result feeds a broadcast binary op and a reduction over a random subset
// of axes, with or without keep.
func (s *propSuite) propComposition(t *rapid.T) {
	shape := propShape(t, "shape", 2, 4)
	dt := s.dtype(t, false)
	a := s.values(t, "x", shape, dt, false)
	x := s.input(t, "x", a, dt)
	desc := fmt.Sprint(shape)

	p := rapid.Permutation(propRange(len(shape))).Draw(t, "perm")
	x, a = x.Permute(p...), a.permute(p)
	desc += fmt.Sprintf(".Permute(%v)", p)
	if rapid.Bool().Draw(t, "reshape") {
		target := propFactorShape(t, propNumel(a.shape))
		if len(target) == 0 {
			target = []int{1}
		}
		x, a = x.Reshape(target...), a.reshape(target)
		desc += fmt.Sprintf(".Reshape(%v)", target)
	}
	m := s.drawMove(t, "slice", a.shape, true)
	x, a = m.apply(x), m.ref(a)
	desc += "." + m.desc
	propExpect(t, desc, x, a, 0)

	op := rapid.SampledFrom(propBinOps[:3]).Draw(t, "op")
	if rapid.Bool().Draw(t, "maximum") {
		op = propBinOps[5]
	}
	ws := propOperand(t, "w", a.shape)
	w := s.values(t, "w", ws, dt, false)
	y := op.op(x, s.input(t, "w", w, dt))
	ya := propBinaryRef(a, w, op.ref)
	desc = fmt.Sprintf("%s(%s, %v)", op.name, desc, ws)
	propExpect(t, desc, y, ya, 0)

	kind, axes, args, keep := propDrawReduce(t, len(ya.shape))
	got := propApplyReduce(y, kind, args, keep)
	propExpect(t, fmt.Sprintf("%s.%s(%v, keep=%v)", desc, kind, args, keep), got, ya.reduce(kind, axes, keep), propReduceTol(kind, dt))
}

// propDrawReduce draws a reduction over a random subset of n axes (none
// meaning all), as normalised axes and as arguments (some negative).
func propDrawReduce(t *rapid.T, n int) (kind string, axes, args []int, keep bool) {
	kind = rapid.SampledFrom([]string{"sum", "max", "min", "mean"}).Draw(t, "reduce")
	pick := rapid.SliceOfN(rapid.Bool(), n, n).Draw(t, "reduce_axes")
	for k := range pick {
		if pick[k] {
			axes = append(axes, k)
			args = append(args, propAxisArg(t, "reduce_axis", k, n))
		}
	}
	if len(args) > 1 && rapid.Bool().Draw(t, "shuffle_axes") {
		args = rapid.Permutation(args).Draw(t, "axes_order")
	}
	keep = rapid.Bool().Draw(t, "keep")
	return
}

func propApplyReduce(x *forge.Tensor, kind string, args []int, keep bool) *forge.Tensor {
	switch {
	case kind == "sum" && keep:
		return x.SumKeep(args...)
	case kind == "sum":
		return x.Sum(args...)
	case kind == "max" && keep:
		return x.MaxKeep(args...)
	case kind == "max":
		return x.Max(args...)
	case kind == "min" && keep:
		return x.MinKeep(args...)
	case kind == "min":
		return x.Min(args...)
	case kind == "mean" && keep:
		return x.MeanKeep(args...)
	}
	return x.Mean(args...)
}

func propReduceTol(kind string, dt forge.DType) float64 {
	if kind == "mean" {
		return propTol(dt)
	}
	return 0
}

// propReduce: Sum/Max/Min/Mean over random axis subsets, with and without
// keep, of strided inputs.
func (s *propSuite) propReduce(t *rapid.T) {
	shape := propShape(t, "shape", 0, 4)
	dt := s.dtype(t, false)
	a := s.values(t, "x", shape, dt, false)
	x := s.input(t, "x", a, dt)
	kind, axes, args, keep := propDrawReduce(t, len(shape))
	got := propApplyReduce(x, kind, args, keep)
	propExpect(t, fmt.Sprintf("%v.%s(%v, keep=%v)", shape, kind, args, keep), got, a.reduce(kind, axes, keep), propReduceTol(kind, dt))
}

// propArgExtreme: ArgMax/ArgMin pick the first extreme along an axis.
func (s *propSuite) propArgExtreme(t *rapid.T) {
	shape := propShape(t, "shape", 1, 4)
	dt := s.dtype(t, false)
	a := s.values(t, "x", shape, dt, false)
	x := s.input(t, "x", a, dt)
	ax := rapid.IntRange(0, len(shape)-1).Draw(t, "axis")
	aarg := propAxisArg(t, "axis", ax, len(shape))
	kind := rapid.SampledFrom([]string{"argmax", "argmin"}).Draw(t, "kind")
	var got *forge.Tensor
	if kind == "argmax" {
		got = x.ArgMax(aarg)
	} else {
		got = x.ArgMin(aarg)
	}
	if got.DType() != forge.Int32 {
		t.Fatalf("%s: dtype %v, want int32", kind, got.DType())
	}
	propExpect(t, fmt.Sprintf("%v.%s(%d)", shape, kind, aarg), got, a.arg(kind, ax), 0)
}

// propLarge: tensors of 2¹⁵–2¹⁸ elements, so that the backend's parallel
// and blocked code paths run (small tensors take the serial ones): a
// broadcast binary op, a strided copy, a reduction, ArgMax/ArgMin,
// IndexSelect and Gather, each on a strided input.
func (s *propSuite) propLarge(t *rapid.T) {
	rank := rapid.IntRange(1, 4).Draw(t, "rank")
	exp := rapid.IntRange(15, 17).Draw(t, "log2_elements")
	total := 1<<exp + rapid.IntRange(0, 1<<exp).Draw(t, "elements")
	shape := make([]int, rank)
	rest := 1
	for k := 0; k < rank-1; k++ {
		shape[k] = rapid.SampledFrom([]int{1, 2, 3, 4, 7, 8, 16, 31, 64, 100, 127}).Draw(t, "dim")
		rest *= shape[k]
	}
	shape[rank-1] = max(1, total/rest)
	shape = rapid.Permutation(shape).Draw(t, "dims_order")
	dt := s.dtype(t, false)
	a := propHashed(shape, rapid.Uint64().Draw(t, "seed"))
	x := s.input(t, "x", a, dt)
	n := len(shape)
	switch kind := rapid.SampledFrom([]string{"binary", "contiguous", "reduce", "arg", "index_select", "gather"}).Draw(t, "kind"); kind {
	case "binary":
		op := rapid.SampledFrom([]propBinOp{propBinOps[0], propBinOps[2], propBinOps[5], propBinOps[11]}).Draw(t, "op")
		ws := propOperand(t, "w", shape)
		w := propHashed(ws, rapid.Uint64().Draw(t, "w_seed"))
		propExpect(t, fmt.Sprintf("%s(%v, %v)", op.name, shape, ws), op.op(x, s.input(t, "w", w, dt)), propBinaryRef(a, w, op.ref), 0)
	case "contiguous":
		y := x.Contiguous()
		if !y.IsContiguous() {
			t.Fatalf("Contiguous() of %v is not contiguous: strides %v", shape, y.Strides())
		}
		propExpect(t, fmt.Sprintf("%v (strides %v).Contiguous()", shape, x.Strides()), y, a, 0)
	case "reduce":
		kind, axes, args, keep := propDrawReduce(t, n)
		propExpect(t, fmt.Sprintf("%v (strides %v).%s(%v, keep=%v)", shape, x.Strides(), kind, args, keep),
			propApplyReduce(x, kind, args, keep), a.reduce(kind, axes, keep), propReduceTol(kind, dt))
	case "arg":
		ax := rapid.IntRange(0, n-1).Draw(t, "axis")
		if rapid.Bool().Draw(t, "argmax") {
			propExpect(t, fmt.Sprintf("%v.ArgMax(%d)", shape, ax), x.ArgMax(ax), a.arg("argmax", ax), 0)
		} else {
			propExpect(t, fmt.Sprintf("%v.ArgMin(%d)", shape, ax), x.ArgMin(ax), a.arg("argmin", ax), 0)
		}
	case "index_select", "gather":
		m := s.drawMove(t, kind, shape, true)
		propExpect(t, fmt.Sprintf("%v.%s", shape, m.desc), m.apply(x), m.ref(a), 0)
	}
}

// propHashed fills shape with multiples of 1/4 in [-3, 3] derived from seed
// (too many elements to draw one by one).
func propHashed(shape []int, seed uint64) propArray {
	a := propZeros(shape)
	for i := range a.v {
		z := seed + uint64(i)*0x9e3779b97f4a7c15
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		a.v[i] = float64(int(z%25)-12) / 4
	}
	return a
}

// ---------------------------------------------------------------------------
// Gradients

// leaf makes a contiguous float leaf that requires a gradient.
func (s *propSuite) leaf(a propArray, dt forge.DType) *forge.Tensor {
	return s.tensor(a, dt).RequiresGrad()
}

// expectGrad compares x's accumulated gradient with want.
func propExpectGrad(t *rapid.T, what string, x *forge.Tensor, want propArray, tol float64) {
	t.Helper()
	g := x.Grad()
	if g == nil {
		t.Fatalf("%s: no gradient", what)
	}
	if g.DType() != x.DType() {
		t.Fatalf("%s: gradient dtype %v, tensor dtype %v", what, g.DType(), x.DType())
	}
	propExpect(t, what, g, want, tol)
}

// propGradSumPermute: the gradient of Sum(x.Permute(p)) is ones.
func (s *propSuite) propGradSumPermute(t *rapid.T) {
	shape := propShape(t, "shape", 0, 4)
	dt := s.dtype(t, false)
	x := s.leaf(s.values(t, "x", shape, dt, false), dt)
	p := rapid.Permutation(propRange(len(shape))).Draw(t, "perm")
	x.Permute(p...).Sum().Backward()
	ones := propZeros(shape)
	for i := range ones.v {
		ones.v[i] = 1
	}
	propExpectGrad(t, fmt.Sprintf("grad of Sum(%v.Permute(%v))", shape, p), x, ones, 0)
}

// propGradAdjoint: for a chain of movement ops f, the gradient of
// Sum(f(x)·w) scatters w back to where each output element came from.
func (s *propSuite) propGradAdjoint(t *rapid.T) {
	shape := propShape(t, "shape", 0, 4)
	dt := s.dtype(t, false)
	x := s.leaf(s.values(t, "x", shape, dt, false), dt)
	src := propIota(shape)
	y := x
	desc := fmt.Sprint(shape)
	steps := rapid.IntRange(1, 3).Draw(t, "steps")
	for i := 0; i < steps; i++ {
		var ok []string
		for _, k := range propMoveKinds {
			if propKindOK(k, len(src.shape), dt) {
				ok = append(ok, k)
			}
		}
		m := s.drawMove(t, rapid.SampledFrom(ok).Draw(t, "kind"), src.shape, true)
		y, src = m.apply(y), m.ref(src)
		desc += "." + m.desc
	}
	w := s.values(t, "w", src.shape, dt, false)
	y.Mul(s.tensor(w, dt)).Sum().Backward()
	propExpectGrad(t, "grad of Sum("+desc+"·w)", x, propAdjoint(shape, src, w), 0)
}

// propGradConcat: the gradient of Concat splits back into its inputs; an
// input that needs no gradient gets none.
func (s *propSuite) propGradConcat(t *rapid.T) {
	base := propShape(t, "shape", 1, 4)
	n := len(base)
	ax := rapid.IntRange(0, n-1).Draw(t, "axis")
	k := rapid.IntRange(1, 4).Draw(t, "count")
	dt := s.dtype(t, false)
	var xs []*forge.Tensor
	var lens []int
	var needs []bool
	total := 0
	for i := 0; i < k; i++ {
		sh := slices.Clone(base)
		sh[ax] = rapid.IntRange(1, 5).Draw(t, "len")
		x := s.tensor(s.values(t, "x", sh, dt, false), dt)
		need := i == 0 || rapid.Bool().Draw(t, "requires_grad")
		if need {
			x.RequiresGrad()
		}
		xs, lens, needs = append(xs, x), append(lens, sh[ax]), append(needs, need)
		total += sh[ax]
	}
	oshape := slices.Clone(base)
	oshape[ax] = total
	w := s.values(t, "w", oshape, dt, false)
	forge.Concat(propAxisArg(t, "axis", ax, n), xs...).Mul(s.tensor(w, dt)).Sum().Backward()
	off := 0
	for i, x := range xs {
		what := fmt.Sprintf("grad of input %d of Concat(%d, lengths %v)", i, ax, lens)
		if needs[i] {
			propExpectGrad(t, what, x, w.narrow(ax, off, lens[i]), 0)
		} else if x.Grad() != nil {
			t.Fatalf("%s: has a gradient but does not require one", what)
		}
		off += lens[i]
	}
}

// propGradStack: the gradient of Stack is the upstream gradient indexed
// back along the new axis.
func (s *propSuite) propGradStack(t *rapid.T) {
	shape := propShape(t, "shape", 0, 3)
	n := len(shape)
	ax := rapid.IntRange(0, n).Draw(t, "axis")
	k := rapid.IntRange(1, 4).Draw(t, "count")
	dt := s.dtype(t, false)
	var xs []*forge.Tensor
	for i := 0; i < k; i++ {
		xs = append(xs, s.leaf(s.values(t, "x", shape, dt, false), dt))
	}
	w := s.values(t, "w", slices.Insert(slices.Clone(shape), ax, k), dt, false)
	forge.Stack(ax, xs...).Mul(s.tensor(w, dt)).Sum().Backward()
	for i, x := range xs {
		propExpectGrad(t, fmt.Sprintf("grad of input %d of Stack(%d, %d × %v)", i, ax, k, shape), x, w.index(ax, i), 0)
	}
}

// propGradSplit: with loss Σ c_j·Sum(piece_j), the gradient of x is c_j on
// piece j: Split's gradient joins back.
func (s *propSuite) propGradSplit(t *rapid.T) {
	shape := propShape(t, "shape", 1, 4)
	dt := s.dtype(t, false)
	x := s.leaf(s.values(t, "x", shape, dt, false), dt)
	ax := rapid.IntRange(0, len(shape)-1).Draw(t, "axis")
	sizes := propSizes(t, shape[ax])
	cs := rapid.SliceOfN(rapid.IntRange(-4, 4), len(sizes), len(sizes)).Draw(t, "weights")
	var loss *forge.Tensor
	for j, p := range x.Split(ax, sizes...) {
		l := p.Sum().MulScalar(float64(cs[j]))
		if loss == nil {
			loss = l
		} else {
			loss = loss.Add(l)
		}
	}
	loss.Backward()
	want := propBuild(shape, func(idx []int) float64 {
		i := idx[ax]
		for j, sz := range sizes {
			if i < sz {
				return float64(cs[j])
			}
			i -= sz
		}
		panic("unreachable")
	})
	propExpectGrad(t, fmt.Sprintf("grad of Σ c·Sum(Split(%d, %v)), c = %v", ax, sizes, cs), x, want, 0)
}

// propGradExpand: Expand's gradient sums over the stretched and new axes.
func (s *propSuite) propGradExpand(t *rapid.T) {
	out := propShape(t, "out", 0, 4)
	shape := propOperand(t, "x", out)
	dt := s.dtype(t, false)
	x := s.leaf(s.values(t, "x", shape, dt, false), dt)
	w := s.values(t, "w", out, dt, false)
	x.Expand(out...).Mul(s.tensor(w, dt)).Sum().Backward()
	propExpectGrad(t, fmt.Sprintf("grad of Sum(%v.Expand(%v)·w)", shape, out), x, w.sumTo(shape), 0)
}

// propGradReduce: the gradient of Sum(Sum/Mean(x.Permute(p), axes)·w) is
// w (divided by the count for Mean) broadcast over the reduced axes and
// permuted back.
func (s *propSuite) propGradReduce(t *rapid.T) {
	shape := propShape(t, "shape", 0, 4)
	dt := s.dtype(t, false)
	x := s.leaf(s.values(t, "x", shape, dt, false), dt)
	p := rapid.Permutation(propRange(len(shape))).Draw(t, "perm")
	src := propIota(shape).permute(p) // where each element of x.Permute(p) came from
	kind, axes, args, keep := propDrawReduce(t, len(shape))
	if kind != "mean" {
		kind = "sum"
	}
	y := propApplyReduce(x.Permute(p...), kind, args, keep)
	w := s.values(t, "w", y.Shape(), dt, false)
	y.Mul(s.tensor(w, dt)).Sum().Backward()
	// w with the reduced axes kept, broadcast back over them.
	kshape := slices.Clone(src.shape)
	count := 1
	for k := range kshape {
		if len(axes) == 0 || slices.Contains(axes, k) {
			count *= kshape[k]
			kshape[k] = 1
		}
	}
	gz := w.reshape(kshape).expand(src.shape)
	if kind == "mean" {
		for i := range gz.v {
			gz.v[i] /= float64(count)
		}
	}
	propExpectGrad(t, fmt.Sprintf("grad of Sum(%v.Permute(%v).%s(%v, keep=%v)·w)", shape, p, kind, args, keep),
		x, propAdjoint(shape, src, gz), propReduceTol(kind, dt))
}

// propGradBinary: gradients of broadcast add, sub and mul sum back to each
// operand's shape.
func (s *propSuite) propGradBinary(t *rapid.T) {
	out := propShape(t, "out", 0, 4)
	as, bs := propOperand(t, "a", out), propOperand(t, "b", out)
	dt := s.dtype(t, false)
	av, bv := s.values(t, "a", as, dt, false), s.values(t, "b", bs, dt, false)
	a, b := s.leaf(av, dt), s.leaf(bv, dt)
	shape, _ := propBroadcastShape(as, bs)
	w := s.values(t, "w", shape, dt, false)
	op := rapid.SampledFrom(propBinOps[:3]).Draw(t, "op")
	op.op(a, b).Mul(s.tensor(w, dt)).Sum().Backward()
	var ga, gb propArray
	switch op.name {
	case "add":
		ga, gb = w.sumTo(as), w.sumTo(bs)
	case "sub":
		ga = w.sumTo(as)
		gb = propBinaryRef(w, propZeros(bs), func(x, _ float64) float64 { return -x }).sumTo(bs)
	case "mul":
		mul := func(x, y float64) float64 { return x * y }
		ga = propBinaryRef(w, bv, mul).sumTo(as)
		gb = propBinaryRef(w, av, mul).sumTo(bs)
	}
	what := fmt.Sprintf("grad of Sum(%s(%v, %v)·w)", op.name, as, bs)
	propExpectGrad(t, what+" for a", a, ga, 0)
	propExpectGrad(t, what+" for b", b, gb, 0)
}

// propGradExtremeTies needs no reference: the gradient of Sum(Max(x, axes))
// is zero below the maximum, equal among tied maxima, and sums to one over
// each reduced group (likewise Min).
func (s *propSuite) propGradExtremeTies(t *rapid.T) {
	shape := propShape(t, "shape", 1, 4)
	dt := s.dtype(t, false)
	a := propZeros(shape)
	for i, k := range rapid.SliceOfN(rapid.IntRange(0, 2), len(a.v), len(a.v)).Draw(t, "x") {
		a.v[i] = float64(k) // few distinct values: many ties
	}
	x := s.leaf(a, dt)
	kind, _, args, keep := propDrawReduce(t, len(shape))
	if kind != "min" {
		kind = "max"
	}
	y := propApplyReduce(x, kind, args, keep)
	y.Sum().Backward()
	g := x.Grad()
	if g == nil {
		t.Fatalf("%s: no gradient", kind)
	}
	gv := g.Float64s()
	ext := propApplyReduce(x.Detach(), kind, args, true) // forge's own extremes, kept axes
	ev := ext.Float64s()
	es := ext.Shape()
	groupSum := make([]float64, len(ev))
	groupVal := make([]float64, len(ev))
	for i := range groupVal {
		groupVal[i] = math.NaN()
	}
	what := fmt.Sprintf("grad of Sum(%v.%s(%v, keep=%v)), x = %v", shape, kind, args, keep, a.v)
	for i, xv := range a.v {
		o := propRavel(propSource(propUnravel(i, shape), es), es)
		if xv != ev[o] {
			if gv[i] != 0 {
				t.Fatalf("%s: gradient %v at %v, which is not an extreme", what, gv[i], propUnravel(i, shape))
			}
			continue
		}
		if gv[i] <= 0 || (!math.IsNaN(groupVal[o]) && gv[i] != groupVal[o]) {
			t.Fatalf("%s: tied extremes get gradients %v and %v", what, groupVal[o], gv[i])
		}
		groupVal[o] = gv[i]
		groupSum[o] += gv[i]
	}
	for o, sum := range groupSum {
		if math.Abs(sum-1) > 1e-6 {
			t.Fatalf("%s: gradients of group %d sum to %v, want 1", what, o, sum)
		}
	}
}

// propGradOntoSetGrad: Backward adds into a gradient installed with
// SetGrad, whatever that tensor's layout (strided, or broadcast with stride
// 0): the result is the installed values plus the new gradient.
func (s *propSuite) propGradOntoSetGrad(t *rapid.T, broadcast bool) {
	shape := propShape(t, "shape", 1, 4)
	dt := s.dtype(t, false)
	x := s.leaf(s.values(t, "x", shape, dt, false), dt)
	var g0 *forge.Tensor
	var g0a propArray
	if broadcast {
		gs := propOperand(t, "g0", shape)
		small := s.values(t, "g0", gs, dt, false)
		g0, g0a = s.tensor(small, dt).Expand(shape...), small.expand(shape)
	} else {
		g0a = s.values(t, "g0", shape, dt, false)
		g0 = s.input(t, "g0", g0a, dt)
	}
	x.SetGrad(g0)
	w := s.values(t, "w", shape, dt, false)
	x.Mul(s.tensor(w, dt)).Sum().Backward()
	want := propBinaryRef(g0a, w, func(a, b float64) float64 { return a + b })
	propExpectGrad(t, fmt.Sprintf("SetGrad(%v with strides %v), then grad of Sum(x·w) added", g0.Shape(), g0.Strides()), x, want, 0)
}

// propGradReusedLeaf: a leaf used on two paths gets the sum of both
// paths' gradients.
func (s *propSuite) propGradReusedLeaf(t *rapid.T) {
	shape := propShape(t, "shape", 0, 4)
	dt := s.dtype(t, false)
	x := s.leaf(s.values(t, "x", shape, dt, false), dt)
	var loss *forge.Tensor
	want := propZeros(shape)
	desc := ""
	for path := 0; path < 2; path++ {
		var ok []string
		for _, k := range propMoveKinds {
			if propKindOK(k, len(shape), dt) {
				ok = append(ok, k)
			}
		}
		m := s.drawMove(t, rapid.SampledFrom(ok).Draw(t, "kind"), shape, true)
		src := m.ref(propIota(shape))
		w := s.values(t, "w", src.shape, dt, false)
		l := m.apply(x).Mul(s.tensor(w, dt)).Sum()
		if loss == nil {
			loss = l
		} else {
			loss = loss.Add(l)
		}
		want = propBinaryRef(want, propAdjoint(shape, src, w), func(a, b float64) float64 { return a + b })
		desc += " " + m.desc
	}
	loss.Backward()
	propExpectGrad(t, fmt.Sprintf("grad of x %v used by%s", shape, desc), x, want, 0)
}

// propTo: To moves a (possibly strided) tensor of any rank and dtype to
// another device with its shape and values, and is differentiable.
func (s *propSuite) propTo(t *rapid.T, other *forge.Device, minRank, maxRank int) {
	shape := propShape(t, "shape", minRank, maxRank)
	dt := s.dtype(t, true)
	a := s.values(t, "x", shape, dt, true)
	x := s.input(t, "x", a, dt)
	y := x.To(other)
	if y.Device() != other {
		t.Fatalf("To(%s) gave a tensor on %s", other.Name(), y.Device().Name())
	}
	if y.DType() != dt {
		t.Fatalf("To(%s): dtype %v, want %v", other.Name(), y.DType(), dt)
	}
	propExpect(t, fmt.Sprintf("%v.To(%s)", shape, other.Name()), y, a, 0)
	if dt == forge.Int32 {
		return
	}
	l := s.leaf(a, dt)
	w := s.values(t, "w", shape, dt, false)
	l.To(other).Mul(s.tensor(w, dt).To(other)).Sum().Backward()
	if g := l.Grad(); g != nil && g.Device() != s.dev {
		t.Fatalf("gradient through To is on %s, want %s", g.Device().Name(), s.dev.Name())
	}
	propExpectGrad(t, fmt.Sprintf("grad of Sum(%v.To(%s)·w)", shape, other.Name()), l, w, 0)
}

// propGradAccumulates: two Backward passes over fresh graphs add up; after
// ZeroGrad there is no gradient.
func (s *propSuite) propGradAccumulates(t *rapid.T) {
	shape := propShape(t, "shape", 1, 4)
	dt := s.dtype(t, false)
	x := s.leaf(s.values(t, "x", shape, dt, false), dt)
	kind := rapid.SampledFrom(propMoveKinds).Draw(t, "kind")
	m := s.drawMove(t, kind, shape, true)
	src := m.ref(propIota(shape))
	w := s.values(t, "w", src.shape, dt, false)
	loss := func() { m.apply(x).Mul(s.tensor(w, dt)).Sum().Backward() }
	loss()
	first := propArray{shape: x.Grad().Shape(), v: x.Grad().Float64s()}
	loss()
	twice := propBinaryRef(first, first, func(a, b float64) float64 { return a + b })
	propExpectGrad(t, "grad after two Backward passes through "+m.desc, x, twice, 0)
	x.ZeroGrad()
	if x.Grad() != nil {
		t.Fatalf("ZeroGrad left a gradient")
	}
}
