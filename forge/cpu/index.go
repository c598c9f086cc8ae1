package cpu

import (
	"fmt"

	"github.com/forgeml/forge/forge/backend"
)

// Indexing kernels: IndexSelect/IndexAdd (whole slices along one axis, the
// embedding forward and backward) and Gather/ScatterAdd (one element per
// index, torch.gather and its adjoint).
//
// Every tensor is seen as three flattened groups around the axis: (P, S, Q)
// with P the product of the dimensions before the axis, S the axis and Q the
// product of those after it. The adds are deterministic without atomics:
// each output element belongs to exactly one worker, which adds into it in
// index order, so the result does not depend on the number of workers.

// elem is the element type of the indexing kernels, which move any dtype.
type elem interface{ ~float32 | ~float64 | ~int32 }

// elems returns v's slice (from its offset) as []E; E must match the dtype.
func elems[E elem](v backend.View) []E {
	var z E
	switch any(z).(type) {
	case float32:
		return any(f32(v)).([]E)
	case float64:
		return any(f64(v)).([]E)
	default:
		return any(i32(v)).([]E)
	}
}

// indexList returns the Int32 indices of idx in row-major order: the buffer
// itself when idx is contiguous, a copy otherwise.
func indexList(kernel string, idx backend.View) []int32 {
	if idx.DType() != backend.Int32 {
		panic(fmt.Sprintf("cpu: %s: indices must be int32, got %v", kernel, idx.DType()))
	}
	n := idx.Numel()
	if idx.IsContiguous() {
		return i32(idx)[:n]
	}
	out := make([]int32, 0, n)
	l := newLayout(idx)
	src, st := buf(idx).I32, l.innerStride(0)
	l.forRows(0, l.rows(), func(o []int) {
		for j := 0; j < l.inner(); j++ {
			out = append(out, src[o[0]+j*st])
		}
	})
	return out
}

// checkIndices panics, on the calling goroutine (where forge.Try can recover
// it), unless every index lies in [0, s).
func checkIndices(kernel string, idx []int32, s int) {
	for _, v := range idx {
		if v < 0 || int(v) >= s {
			panic(fmt.Sprintf("cpu: %s: index %d out of range [0, %d)", kernel, v, s))
		}
	}
}

// dispatchElem runs f for the dtype of v.
func dispatchElem(kernel string, v backend.View, f32 func(), f64 func(), i32 func()) {
	switch v.DType() {
	case backend.Float32:
		f32()
	case backend.Float64:
		f64()
	case backend.Int32:
		i32()
	default:
		panic(badDType(kernel, v.DType()))
	}
}

func checkSameDType(kernel string, a, b backend.View) {
	if a.DType() != b.DType() {
		panic(mismatch(kernel, a.DType(), b.DType()))
	}
}

// minChunk is the smallest column run handed to one worker by the adds
// (16 cache lines of float32), so that neighbours rarely share a line.
const minChunk = 256

// colChunks returns how many column chunks of q columns to cut for p
// independent slices so that the p·chunks work units can keep the workers
// busy; 1 when q is too narrow to split.
func (b *Backend) colChunks(p, q int) int {
	if p >= b.workers {
		return 1
	}
	want := (b.workers + p - 1) / p
	return max(1, min(want, q/minChunk))
}

// chunkRange returns the columns [lo, hi) of chunk k of nq over q columns;
// chunk edges fall on multiples of 16 elements.
func chunkRange(k, nq, q int) (lo, hi int) {
	step := (q/nq + 15) &^ 15
	lo, hi = min(k*step, q), min((k+1)*step, q)
	if k == nq-1 {
		hi = q
	}
	return lo, hi
}

// ---------------------------------------------------------------------------
// IndexSelect / IndexAdd

// IndexSelect writes dst (P, I, Q) = src (P, S, Q) at indices idx (I) along
// axis.
func (b *Backend) IndexSelect(dst, src, idx backend.View, axis int) {
	checkSameDType("index_select", dst, src)
	ix := indexList("index_select", idx)
	p, s, q := backend.SplitAxis(src.Shape, axis)
	checkIndices("index_select", ix, s)
	dispatchElem("index_select", src,
		func() { indexSelect(b, elems[float32](dst), elems[float32](src), ix, p, s, q) },
		func() { indexSelect(b, elems[float64](dst), elems[float64](src), ix, p, s, q) },
		func() { indexSelect(b, elems[int32](dst), elems[int32](src), ix, p, s, q) })
}

// indexSelect copies rows: dst[p, i, :] = src[p, idx[i], :], dst (P, I, Q),
// src (P, S, Q), in parallel over the P·I destination rows.
func indexSelect[E elem](b *Backend, dst, src []E, idx []int32, p, s, q int) {
	ni := len(idx)
	dst, src = dst[:p*ni*q], src[:p*s*q]
	b.parallelFor(p*ni, 2*q+1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			pp, i := r/ni, r%ni
			from := (pp*s + int(idx[i])) * q
			copy(dst[r*q:(r+1)*q], src[from:from+q])
		}
	})
}

// IndexAdd is IndexSelect's adjoint: dst (P, S, Q) is zeroed, then
// dst[:, idx[i], :] += src[:, i, :] in index order.
func (b *Backend) IndexAdd(dst, src, idx backend.View, axis int) {
	checkSameDType("index_add", dst, src)
	ix := indexList("index_add", idx)
	p, s, q := backend.SplitAxis(dst.Shape, axis)
	checkIndices("index_add", ix, s)
	dispatchElem("index_add", dst,
		func() { indexAdd(b, elems[float32](dst), elems[float32](src), ix, p, s, q) },
		func() { indexAdd(b, elems[float64](dst), elems[float64](src), ix, p, s, q) },
		func() { indexAdd(b, elems[int32](dst), elems[int32](src), ix, p, s, q) })
}

// indexAdd accumulates rows: dst[p, idx[i], :] += src[p, i, :] for i in
// order, dst (P, S, Q) zeroed first, src (P, I, Q). The work is split over
// (p, column chunk) units when there are enough of them, otherwise over
// ranges of destination rows s, each worker scanning all indices and keeping
// those it owns. Either way an output element has one owner, which adds
// into it in index order.
func indexAdd[E elem](b *Backend, dst, src []E, idx []int32, p, s, q int) {
	ni := len(idx)
	dst, src = dst[:p*s*q], src[:p*ni*q]
	if len(dst) == 0 {
		return
	}
	nq := b.colChunks(p, q)
	if p*nq >= 2 || s == 1 {
		b.parallelFor(p*nq, (ni+s)*q/nq+1, func(lo, hi int) {
			for u := lo; u < hi; u++ {
				pp, k := u/nq, u%nq
				c0, c1 := chunkRange(k, nq, q)
				d := dst[pp*s*q : (pp+1)*s*q]
				for r := 0; r < s; r++ {
					clear(d[r*q+c0 : r*q+c1])
				}
				for i, t := range idx {
					addTo(d[int(t)*q+c0:int(t)*q+c1], src[(pp*ni+i)*q+c0:(pp*ni+i)*q+c1])
				}
			}
		})
		return
	}
	// One slice (p == 1), narrow rows: split the destination rows.
	b.parallelFor(s, (ni*q+s-1)/s+q+1, func(lo, hi int) {
		clear(dst[lo*q : hi*q])
		for i, t := range idx {
			if r := int(t); r >= lo && r < hi {
				addTo(dst[r*q:(r+1)*q], src[i*q:(i+1)*q])
			}
		}
	})
}

// addTo adds src into dst elementwise.
func addTo[E elem](dst, src []E) {
	src = src[:len(dst)]
	for j, v := range src {
		dst[j] += v
	}
}

// ---------------------------------------------------------------------------
// Gather / ScatterAdd

// Gather writes dst[p, i, q] = src[p, idx[p, i, q], q] along axis: idx and
// dst are (P, I, Q), src is (P, S, Q). All contiguous.
func (b *Backend) Gather(dst, src, idx backend.View, axis int) {
	checkSameDType("gather", dst, src)
	ix := indexList("gather", idx)
	p, ni, q := backend.SplitAxis(idx.Shape, axis)
	s := src.Shape[axis]
	checkIndices("gather", ix, s)
	dispatchElem("gather", src,
		func() { gatherAxis(b, elems[float32](dst), elems[float32](src), ix, p, s, ni, q) },
		func() { gatherAxis(b, elems[float64](dst), elems[float64](src), ix, p, s, ni, q) },
		func() { gatherAxis(b, elems[int32](dst), elems[int32](src), ix, p, s, ni, q) })
}

// gatherAxis: dst[p, i, q] = src[p, idx[p, i, q], q], dst and idx (P, I, Q),
// src (P, S, Q), in parallel over the P·I rows of Q.
func gatherAxis[E elem](b *Backend, dst, src []E, idx []int32, p, s, ni, q int) {
	dst, src, idx = dst[:p*ni*q], src[:p*s*q], idx[:p*ni*q]
	b.parallelFor(p*ni, 3*q, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			base := (r / ni) * s * q
			d, ir := dst[r*q:(r+1)*q], idx[r*q:(r+1)*q]
			for j, t := range ir {
				d[j] = src[base+int(t)*q+j]
			}
		}
	})
}

// ScatterAdd is Gather's adjoint: dst (P, S, Q) is zeroed, then
// dst[p, idx[p, i, q], q] += g[p, i, q] for i in order.
func (b *Backend) ScatterAdd(dst, g, idx backend.View, axis int) {
	checkSameDType("scatter_add", dst, g)
	ix := indexList("scatter_add", idx)
	p, ni, q := backend.SplitAxis(idx.Shape, axis)
	s := dst.Shape[axis]
	checkIndices("scatter_add", ix, s)
	dispatchElem("scatter_add", dst,
		func() { scatterAddAxis(b, elems[float32](dst), elems[float32](g), ix, p, s, ni, q) },
		func() { scatterAddAxis(b, elems[float64](dst), elems[float64](g), ix, p, s, ni, q) },
		func() { scatterAddAxis(b, elems[int32](dst), elems[int32](g), ix, p, s, ni, q) })
}

// scatterAddAxis: dst[p, idx[p, i, q], q] += g[p, i, q] for i in order, dst
// (P, S, Q) zeroed first, g and idx (P, I, Q). Units are (p, column chunk)
// when there are enough, otherwise ranges of destination rows s whose
// workers scan every index and keep those they own.
func scatterAddAxis[E elem](b *Backend, dst, g []E, idx []int32, p, s, ni, q int) {
	dst, g, idx = dst[:p*s*q], g[:p*ni*q], idx[:p*ni*q]
	if len(dst) == 0 {
		return
	}
	nq := b.colChunks(p, q)
	if p*nq >= 2 || s == 1 {
		b.parallelFor(p*nq, (2*ni+s)*q/nq+1, func(lo, hi int) {
			for u := lo; u < hi; u++ {
				pp, k := u/nq, u%nq
				c0, c1 := chunkRange(k, nq, q)
				d := dst[pp*s*q : (pp+1)*s*q]
				for r := 0; r < s; r++ {
					clear(d[r*q+c0 : r*q+c1])
				}
				for i := 0; i < ni; i++ {
					off := (pp*ni + i) * q
					gr, ir := g[off+c0:off+c1], idx[off+c0:off+c1]
					for j, t := range ir {
						d[int(t)*q+c0+j] += gr[j]
					}
				}
			}
		})
		return
	}
	// One slice (p == 1), narrow rows: split the destination rows.
	b.parallelFor(s, (2*ni*q+s-1)/s+q+1, func(lo, hi int) {
		clear(dst[lo*q : hi*q])
		for i := 0; i < ni; i++ {
			gr, ir := g[i*q:(i+1)*q], idx[i*q:(i+1)*q]
			for j, t := range ir {
				if r := int(t); r >= lo && r < hi {
					dst[r*q+j] += gr[j]
				}
			}
		}
	})
}
