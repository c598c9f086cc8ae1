package metal

// IndexSelect, IndexAdd, Gather and ScatterAdd (kernels/index.metal): the
// embedding forward and backward, torch.gather and its adjoint. Data is
// float32 or int32, indices int32. Every tensor is seen as (P, S, Q) or
// (P, I, Q) around the axis. The adds are deterministic without atomics:
// IndexAdd sorts the indices (a stable radix sort on the device) into
// per-row lists and sums each list in index order; ScatterAdd gives each
// (p, q) column one thread that adds in index order, or, for a few columns
// with long lists, takes IndexAdd's route with (column, index) keys. Both
// reproduce the CPU backend bit for bit.

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
)

var (
	kIndexSelect    = kernels.Name("index_select", "x32")
	kIndexAdd       = kernels.Name("index_add", "x32")
	kIndexSortKeys  = kernels.Name("index_sort", "keys")
	kIndexRowStarts = kernels.Name("index_row", "starts")
	kGather         = kernels.Name("gather", "x32")
	kScatterAdd     = kernels.Name("scatter_add", "x32")
	kScatterSorted  = kernels.Name("scatter_add", "sorted", "x32")
)

// indexParams mirrors IndexParams in kernels/index.metal.
type indexParams struct {
	P, S, Q, NI uint32
	IStride     int32
	N           uint32
	NPass       uint32
	Scatter     uint32
	NKeys       uint32
	NSort       uint32
}

// Radix sort geometry (INDEX_SORT_THREADS, INDEX_SORT_BITS in
// kernels/index.metal).
const (
	indexSortThreads = 256
	indexSortBits    = 4
)

// indexGroups returns (P, S, Q) of shape around axis.
func indexGroups(kernel string, shape []int, axis int) (p, s, q int) {
	if axis < 0 || axis >= len(shape) {
		panic(fmt.Sprintf("metal: %s: axis %d out of range for shape %v", kernel, axis, shape))
	}
	return backend.SplitAxis(shape, axis)
}

// indexData checks the dtypes of an indexing op: data views float32 or
// int32 and alike, indices int32.
func indexData(kernel string, a, b, idx backend.View) {
	checkKernelDType(kernel, f32OrI32, a, b)
	if a.DType() != b.DType() {
		panic(fmt.Sprintf("metal: %s: dtype mismatch: %v and %v", kernel, a.DType(), b.DType()))
	}
	if idx.DType() != backend.Int32 {
		panic(fmt.Sprintf("metal: %s: indices must be int32, got %v", kernel, idx.DType()))
	}
}

// ixSizes are the sizes of an indexing call: the data as (P, S, Q) around
// the axis, I indices along it, and n, dst's element count.
type ixSizes struct {
	p, s, q, ni, n int
}

// ixShape is how an indexing op lays out its views: the indices a list
// (I) along the axis (IndexSelect, IndexAdd) or a tensor (P, I, Q)
// (Gather, ScatterAdd); the data (P, S, Q) src (the forward ops) or dst
// (their adjoints, the adds), the other side (P, I, Q).
type ixShape struct {
	list, adjoint bool
}

// ixCheck checks an indexing call of shape sh and returns its sizes: P
// and Q from the data (list) or from idx, dst contiguous unless the call
// is empty (n = 0).
func ixCheck(kernel string, sh ixShape, dst, src, idx backend.View, axis int) (z ixSizes) {
	indexData(kernel, dst, src, idx)
	data := src
	if sh.adjoint {
		data = dst
	}
	if sh.list {
		z.p, z.s, z.q = indexGroups(kernel, data.Shape, axis)
		z.ni = idx.Numel()
	} else {
		z.p, z.ni, z.q = indexGroups(kernel, idx.Shape, axis)
		z.s = data.Shape[axis]
	}
	z.n = z.p * z.ni * z.q
	if sh.adjoint {
		z.n = z.p * z.s * z.q
	}
	if z.n > 0 && !dst.IsContiguous() {
		panic(fmt.Sprintf("metal: %s: dst must be contiguous (shape %v strides %v)", kernel, dst.Shape, dst.Strides))
	}
	return z
}

// params is the parameter block of the sizes (N, the threads' count, and
// the sort's fields unset) with the indices' stride.
func (z ixSizes) params(istride int) indexParams {
	return indexParams{P: uint32(z.p), S: uint32(z.s), Q: uint32(z.q), NI: uint32(z.ni), IStride: int32(istride)}
}

// ixIndexList returns the binding and stride of a list of int32 indices: a
// 1-D view of any stride as it is; other views contiguous (copied if
// needed).
func (b *Backend) ixIndexList(idx backend.View) (backend.View, int, func()) {
	if len(idx.Shape) == 1 {
		return idx, idx.Strides[0], func() {}
	}
	cv, free := b.contiguous(idx)
	return cv, 1, free
}

// IndexSelect writes dst (P, I, Q) = src (P, S, Q) at indices idx (I)
// along axis.
func (b *Backend) IndexSelect(dst, src, idx backend.View, axis int) {
	z := ixCheck(kIndexSelect, ixShape{list: true}, dst, src, idx, axis)
	if z.n == 0 {
		return
	}
	checkCount(kIndexSelect, max(z.n, z.p*z.s*z.q))
	src, freeSrc := b.contiguous(src)
	defer freeSrc()
	iv, istride, freeIdx := b.ixIndexList(idx)
	defer freeIdx()
	prm := z.params(istride)
	prm.N = uint32(z.n)
	b.runEW(kIndexSelect, pkey(kIndexSelect), z.n, b.arg(dst), b.arg(src), b.arg(iv), bytesArg(prm))
}

// Gather writes dst (P, I, Q) = src[p, idx[p, i, q], q], idx (P, I, Q),
// src (P, S, Q).
func (b *Backend) Gather(dst, src, idx backend.View, axis int) {
	z := ixCheck(kGather, ixShape{}, dst, src, idx, axis)
	if z.n == 0 {
		return
	}
	checkCount(kGather, max(z.n, z.p*z.s*z.q))
	src, freeSrc := b.contiguous(src)
	defer freeSrc()
	idx, freeIdx := b.contiguous(idx)
	defer freeIdx()
	prm := z.params(1)
	prm.N = uint32(z.n)
	b.runEW(kGather, pkey(kGather), z.n, b.arg(dst), b.arg(src), b.arg(idx), bytesArg(prm))
}

// ixZero writes zeros over a contiguous view.
func (b *Backend) ixZero(dst backend.View) {
	b.Fill(backend.View{Buf: dst.Buf, Offset: dst.Offset, Shape: []int{dst.Numel()}, Strides: []int{1}}, 0)
}

// ixSorted is the result of ixSort: the scratch buffer (free it when done)
// and bindings of the sorted values and the row starts.
type ixSorted struct {
	scratch      backend.Buffer
	vals, starts backend.View
}

// ixSort runs the sort and row-start kernels of IndexAdd over prm.NSort
// elements (keys from iv, see index_sort_keys) with keys below prm.NKeys
// (+1 for bad indices).
func (b *Backend) ixSort(iv backend.View, prm indexParams) ixSorted {
	ni, nkeys := int(prm.NSort), int(prm.NKeys)
	// Keys lie in [0, nkeys] (the top one marks a bad index): enough 4-bit
	// passes for nkeys.
	npass := max(1, (bits.Len(uint(nkeys))+indexSortBits-1)/indexSortBits)
	prm.NPass = uint32(npass)
	// scratch: keys, values of sort buffer 0; keys, values of buffer 1;
	// the nkeys+1 row starts.
	scratch := b.Alloc(backend.Int32, 4*ni+nkeys+1)
	at := func(off int) backend.View { return backend.View{Buf: scratch, Offset: off} }
	sorted := ((npass - 1) % 2) * 2 * ni // the keys of the buffer the last pass wrote
	starts := 4 * ni

	key := pkey(kIndexSortKeys)
	pipe := b.pipelineFor(key)
	t := min(indexSortThreads, pipe.MaxThreads())
	t -= t % pipe.SIMDWidth()
	b.runPipe(kIndexSortKeys, key, pipe, [3]int{1, 1, 1}, [3]int{t, 1, 1}, b.arg(iv), b.arg(at(0)), bytesArg(prm))

	b.runEW(kIndexRowStarts, pkey(kIndexRowStarts), nkeys+1, b.arg(at(sorted)), b.arg(at(starts)), bytesArg(prm))
	return ixSorted{scratch: scratch, vals: at(sorted + ni), starts: at(starts)}
}

// IndexAdd is IndexSelect's adjoint: dst (P, S, Q) is zeroed, then
// dst[:, idx[i], :] += src[:, i, :] in index order.
func (b *Backend) IndexAdd(dst, src, idx backend.View, axis int) {
	z := ixCheck(kIndexAdd, ixShape{list: true, adjoint: true}, dst, src, idx, axis)
	if z.n == 0 {
		return
	}
	if z.ni == 0 {
		b.ixZero(dst)
		return
	}
	checkCount(kIndexAdd, max(z.n, z.p*z.ni*z.q, 4*z.ni+z.s+1))
	src, freeSrc := b.contiguous(src)
	defer freeSrc()
	iv, istride, freeIdx := b.ixIndexList(idx)
	defer freeIdx()
	prm := z.params(istride)
	prm.NKeys, prm.NSort = uint32(z.s), uint32(z.ni)
	srt := b.ixSort(iv, prm)
	defer b.Free(srt.scratch)
	prm.N = uint32(z.n)
	b.runEW(kIndexAdd, pkey(kIndexAdd, cBool(0, dst.DType() == backend.Int32)), z.n,
		b.arg(dst), b.arg(src), b.arg(srt.vals), b.arg(srt.starts), bytesArg(prm))
}

// scatterSortCols is the most (P·Q) columns for which ScatterAdd sorts
// (IndexAdd's route) rather than walking each column's index list in one
// thread: the single-threadgroup sort does about 2·npass·P·I·Q/256 steps a
// thread, a column walk I, so sorting pays only for a few columns (and
// then turns a handful of long serial loops into parallel work).
const scatterSortCols = 8

// ScatterAdd is Gather's adjoint: dst (P, S, Q) is zeroed, then
// dst[p, idx[p, i, q], q] += g[p, i, q] for i in order; g and idx (P, I, Q).
func (b *Backend) ScatterAdd(dst, g, idx backend.View, axis int) {
	z := ixCheck(kScatterAdd, ixShape{adjoint: true}, dst, g, idx, axis)
	if z.n == 0 {
		return
	}
	if z.ni == 0 {
		b.ixZero(dst)
		return
	}
	p, ni, q := z.p, z.ni, z.q
	checkCount(kScatterAdd, max(z.n, p*ni*q))
	g, freeG := b.contiguous(g)
	defer freeG()
	idx, freeIdx := b.contiguous(idx)
	defer freeIdx()
	prm := z.params(1)
	intAdd := cBool(0, dst.DType() == backend.Int32)
	if nkeys := p * q * (z.s + 1); p*q <= scatterSortCols && 4*p*ni*q+nkeys+1 <= math.MaxInt32 {
		// Few columns: sort the P·I·Q elements by (column, index).
		prm.NSort, prm.Scatter, prm.NKeys = uint32(p*ni*q), 1, uint32(nkeys)
		srt := b.ixSort(idx, prm)
		defer b.Free(srt.scratch)
		prm.N = uint32(z.n)
		b.runEW(kScatterSorted, pkey(kScatterSorted, intAdd), z.n,
			b.arg(dst), b.arg(g), b.arg(srt.vals), b.arg(srt.starts), bytesArg(prm))
		return
	}
	b.ixZero(dst)
	prm.N = uint32(p * q)
	b.runEW(kScatterAdd, pkey(kScatterAdd, intAdd), p*q, b.arg(dst), b.arg(g), b.arg(idx), bytesArg(prm))
}

// indexKernels lists the kernels of this file (for the tests).
var indexKernels = []string{kIndexSelect, kIndexAdd, kIndexSortKeys, kIndexRowStarts, kGather, kScatterAdd, kScatterSorted}
