package cpu

// Reduce: sum, max, min, argmax and argmin over the trailing dimensions of a
// strided view.
//
// The kept dimensions (src.Shape[:k]) and the reduced ones (src.Shape[k:])
// are coalesced separately. Merging adjacent dimensions keeps row-major
// order, so an output's flat index and an element's flat index in the
// reduced extent (what ArgMax reports) survive the coalescing. Two loop
// structures:
//
//   - rows: each output walks its own reduced elements. This is the path of a
//     contiguous trailing reduction (each output a contiguous run).
//   - outer: the innermost kept dimension has a smaller stride than every
//     reduced dimension (reducing the leading axis of a contiguous (N, C)
//     tensor, passed as a (C, N) view with strides (1, C)). Each reduced
//     element's row of outputs is added into a block of accumulators, so
//     memory is read row by row instead of down columns.
//
// Work is split over outputs when there are enough of them; otherwise (a
// full reduction, or few columns) the reduced extent is split into parts
// whose partial results are merged in order, so "first occurrence" still
// holds for ArgMax/ArgMin.
//
// Sums accumulate in float64 (pairwise over contiguous runs); Max and Min
// propagate NaN and ArgMax/ArgMin return the first NaN, as PyTorch does.

import (
	"fmt"

	"github.com/forgeml/forge/forge/backend"
)

// Reduce reduces the last nred dimensions of src into the contiguous dst.
func (b *Backend) Reduce(op backend.ReduceOp, dst, src backend.View, nred int) {
	if nred < 0 || nred > len(src.Shape) {
		panic(fmt.Sprintf("cpu: reduce: nred %d out of range for shape %v", nred, src.Shape))
	}
	switch op {
	case backend.ReduceArgMax, backend.ReduceArgMin:
		if dst.DType() != backend.Int32 {
			panic(fmt.Sprintf("cpu: reduce: %v needs an int32 dst, have %v", op, dst.DType()))
		}
	case backend.ReduceSum, backend.ReduceMax, backend.ReduceMin:
		if dt := dst.DType(); dt != backend.Float32 && dt != backend.Float64 {
			panic(badDType("reduce "+op.String()+" (dst)", dst.DType()))
		}
	default:
		panic(fmt.Sprintf("cpu: reduce: unknown op %v", op))
	}
	switch src.DType() {
	case backend.Float32:
		reduce[float32](b, op, dst, src, nred)
	case backend.Float64:
		reduce[float64](b, op, dst, src, nred)
	default:
		panic(badDType("reduce", src.DType()))
	}
}

// reducePlan is how Reduce walks one call.
type reducePlan struct {
	kept  layout // coalesced kept dims of src (with src's offset)
	red   layout // coalesced reduced dims (offset 0)
	nout  int    // number of outputs
	nr    int    // reduced extent
	outer bool   // accumulate rows of outputs (see the file comment)
	parts int    // > 1: split the reduced extent into this many parts
}

// Minimum outputs per worker before Reduce splits work over outputs rather
// than over the reduced extent. In the outer path a worker's share of each
// row should span many pages: a worker reading half of every 4 KB row
// defeats the hardware prefetcher (measured 2× slower than splitting the
// rows between workers).
const (
	minRowOutputsPerWorker   = 4
	minOuterOutputsPerWorker = 64 << 10
	outerColumnBlock         = 8 << 10 // outputs per accumulator block in the outer path (64 KB, L2)
	outerL1Columns           = 2 << 10 // accumulator blocks up to this size stay in L1
)

func planReduce(op backend.ReduceOp, src backend.View, nred, workers int) reducePlan {
	k := len(src.Shape) - nred
	keptV := backend.View{Offset: src.Offset, Shape: src.Shape[:k], Strides: src.Strides[:k]}
	redV := backend.View{Shape: src.Shape[k:], Strides: src.Strides[k:]}
	if op == backend.ReduceSum || op == backend.ReduceMax || op == backend.ReduceMin {
		// The order of the reduced elements does not matter (Max and Min give
		// NaN if any element is NaN): walk them in memory order, which
		// coalesces e.g. the full reduction of a transposed view.
		redV = memoryOrder(redV)
	}
	p := reducePlan{kept: newLayout(keptV), red: newLayout(redV), nout: keptV.Numel(), nr: redV.Numel()}
	if ks := absInt(p.kept.innerStride(0)); p.kept.inner() > 1 && ks != 0 && p.nr > 1 {
		p.outer = true
		for d, s := range p.red.strides[0] {
			if p.red.shape[d] > 1 && s != 0 && absInt(s) <= ks {
				p.outer = false
			}
		}
	}
	w := workers
	if c := p.nout * p.nr / minGrain; c < w {
		w = c
	}
	if w < 2 {
		return p
	}
	perWorker := minRowOutputsPerWorker
	if p.outer {
		perWorker = minOuterOutputsPerWorker
	}
	if p.nout < w*perWorker {
		p.parts = min(w, p.nr)
	}
	return p
}

// memoryOrder returns v with its dimensions sorted by decreasing |stride|
// (a stable insertion sort; ranks are small).
func memoryOrder(v backend.View) backend.View {
	shape := append([]int(nil), v.Shape...)
	strides := append([]int(nil), v.Strides...)
	for i := 1; i < len(shape); i++ {
		for j := i; j > 0 && absInt(strides[j]) > absInt(strides[j-1]); j-- {
			shape[j], shape[j-1] = shape[j-1], shape[j]
			strides[j], strides[j-1] = strides[j-1], strides[j]
		}
	}
	v.Shape, v.Strides = shape, strides
	return v
}

func absInt(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// reduceAcc holds the running results of a block of outputs: the sum or
// the best value so far (as float64, which holds every float32 exactly)
// and, for ArgMax/ArgMin, its index in the reduced extent.
type reduceAcc struct {
	val []float64
	idx []int
}

func newReduceAcc(op backend.ReduceOp, n int) reduceAcc {
	a := reduceAcc{val: make([]float64, n)}
	if op == backend.ReduceArgMax || op == backend.ReduceArgMin {
		a.idx = make([]int, n)
	}
	return a
}

func reduce[T Float](b *Backend, op backend.ReduceOp, dst, src backend.View, nred int) {
	p := planReduce(op, src, nred, b.workers)
	if p.nout == 0 {
		return
	}
	if p.nr == 0 {
		if op != backend.ReduceSum {
			panic(fmt.Sprintf("cpu: reduce: %v over an empty extent (shape %v, nred %d)", op, src.Shape, nred))
		}
		b.Fill(backend.View{Buf: dst.Buf, Offset: dst.Offset, Shape: []int{p.nout}, Strides: []int{1}}, 0)
		return
	}
	x := wholeFloats[T](src)
	if p.parts > 1 {
		// Few outputs: each part reduces its share of the reduced extent for
		// every output, then the parts merge in order.
		accs := make([]reduceAcc, p.parts)
		b.parallelFor(p.parts, p.nout*p.nr/p.parts, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				accs[i] = newReduceAcc(op, p.nout)
				reduceBlock(&p, op, x, 0, p.nout, i*p.nr/p.parts, (i+1)*p.nr/p.parts, accs[i])
			}
		})
		for _, a := range accs[1:] {
			mergeReduceAcc(op, accs[0], a)
		}
		storeReduceAcc(op, dst, 0, accs[0])
		return
	}
	b.parallelFor(p.nout, p.nr, func(lo, hi int) {
		a := newReduceAcc(op, hi-lo)
		reduceBlock(&p, op, x, lo, hi, 0, p.nr, a)
		storeReduceAcc(op, dst, lo, a)
	})
}

// mergeReduceAcc folds b, the result of a later part of the reduced extent,
// into a.
func mergeReduceAcc(op backend.ReduceOp, a, b reduceAcc) {
	switch op {
	case backend.ReduceSum:
		for i, v := range b.val {
			a.val[i] += v
		}
	case backend.ReduceMax, backend.ReduceArgMax:
		for i, v := range b.val {
			if best := a.val[i]; v > best || (v != v && best == best) {
				a.val[i] = v
				if a.idx != nil {
					a.idx[i] = b.idx[i]
				}
			}
		}
	case backend.ReduceMin, backend.ReduceArgMin:
		for i, v := range b.val {
			if best := a.val[i]; v < best || (v != v && best == best) {
				a.val[i] = v
				if a.idx != nil {
					a.idx[i] = b.idx[i]
				}
			}
		}
	}
}

// storeReduceAcc writes a's results to dst[lo:lo+len].
func storeReduceAcc(op backend.ReduceOp, dst backend.View, lo int, a reduceAcc) {
	if a.idx != nil {
		d := i32(dst)[lo : lo+len(a.idx)]
		for i, v := range a.idx {
			d[i] = int32(v)
		}
		return
	}
	switch dst.DType() {
	case backend.Float32:
		d := f32(dst)[lo : lo+len(a.val)]
		for i, v := range a.val {
			d[i] = float32(v)
		}
	case backend.Float64:
		copy(f64(dst)[lo:], a.val)
	}
}

// redCursor walks the rows (innermost runs) of one view of a coalesced
// layout — or of any strided view, with shape and strides its outer axes
// (RoPE) — without allocating per step.
type redCursor struct {
	shape, strides []int // the outer dims
	idx            []int // multi-index of the current row
	off0, off      int   // offset of the first row; of the current row
	inner, stride  int   // length and stride of the innermost dim
}

func newRedCursor(l layout, v int) redCursor {
	n := len(l.shape) - 1
	return redCursor{
		shape: l.shape[:n], strides: l.strides[v][:n], idx: make([]int, n),
		off0: l.offsets[v], inner: l.shape[n], stride: l.strides[v][n],
	}
}

// seek moves to row r.
func (c *redCursor) seek(r int) {
	c.off = c.off0
	for d := len(c.shape) - 1; d >= 0; d-- {
		c.idx[d] = r % c.shape[d]
		r /= c.shape[d]
		c.off += c.idx[d] * c.strides[d]
	}
}

// next moves to the following row.
func (c *redCursor) next() {
	for d := len(c.shape) - 1; d >= 0; d-- {
		c.idx[d]++
		c.off += c.strides[d]
		if c.idx[d] < c.shape[d] {
			return
		}
		c.off -= c.strides[d] * c.shape[d]
		c.idx[d] = 0
	}
}

// reduceBlock reduces the elements [rLo, rHi) of the reduced extent for the
// outputs [outLo, outHi) into a (indexed from outLo). rLo < rHi.
func reduceBlock[T Float](p *reducePlan, op backend.ReduceOp, x []T, outLo, outHi, rLo, rHi int, a reduceAcc) {
	kc := newRedCursor(p.kept, 0)
	rc := newRedCursor(p.red, 0)
	kc.seek(outLo / kc.inner)
	j := outLo % kc.inner
	for o := outLo; o < outHi; {
		n := min(kc.inner-j, outHi-o)
		base := kc.off + j*kc.stride
		q := o - outLo
		if p.outer {
			for c := 0; c < n; c += outerColumnBlock {
				m := min(outerColumnBlock, n-c)
				var idx []int
				if a.idx != nil {
					idx = a.idx[q+c : q+c+m]
				}
				reduceOuter(op, x, &rc, rLo, rHi, base+c*kc.stride, kc.stride, a.val[q+c:q+c+m], idx)
			}
		} else {
			for c := 0; c < n; c++ {
				reduceRow(op, x, &rc, rLo, rHi, base+c*kc.stride, a, q+c)
			}
		}
		o += n
		j = 0
		kc.next()
	}
}

// reduceRow reduces elements [rLo, rHi) of the reduced extent based at
// base into output i of a.
func reduceRow[T Float](op backend.ReduceOp, x []T, rc *redCursor, rLo, rHi, base int, a reduceAcc, i int) {
	inner, s := rc.inner, rc.stride
	rc.seek(rLo / inner)
	j := rLo % inner
	switch op {
	case backend.ReduceSum:
		acc := 0.0
		for r := rLo; r < rHi; {
			n := min(inner-j, rHi-r)
			acc += sumRun(x, base+rc.off+j*s, n, s)
			r += n
			j = 0
			rc.next()
		}
		a.val[i] = acc
	case backend.ReduceMax, backend.ReduceMin:
		best := x[base+rc.off+j*s]
		for r := rLo; r < rHi; {
			n := min(inner-j, rHi-r)
			if op == backend.ReduceMax {
				best = maxRun(x, base+rc.off+j*s, n, s, best)
			} else {
				best = minRun(x, base+rc.off+j*s, n, s, best)
			}
			r += n
			j = 0
			rc.next()
		}
		a.val[i] = float64(best)
	case backend.ReduceArgMax, backend.ReduceArgMin:
		best, bi := x[base+rc.off+j*s], rLo
		for r := rLo; r < rHi; {
			n := min(inner-j, rHi-r)
			if op == backend.ReduceArgMax {
				best, bi = argMaxRun(x, base+rc.off+j*s, n, s, r, best, bi)
			} else {
				best, bi = argMinRun(x, base+rc.off+j*s, n, s, r, best, bi)
			}
			r += n
			j = 0
			rc.next()
		}
		a.val[i], a.idx[i] = float64(best), bi
	}
}

// sumRun returns the float64 sum of x[p], x[p+s], … (n elements).
func sumRun[T Float](x []T, p, n, s int) float64 {
	switch s {
	case 1:
		return sumContig(x[p : p+n])
	case 0:
		return float64(x[p]) * float64(n)
	}
	var s0, s1 float64
	for ; n >= 2; n -= 2 {
		s0 += float64(x[p])
		s1 += float64(x[p+s])
		p += 2 * s
	}
	if n > 0 {
		s0 += float64(x[p])
	}
	return s0 + s1
}

// sumContig sums x pairwise in float64: halves down to blocks of at most
// 256 elements, each summed with four accumulators.
func sumContig[T Float](x []T) float64 {
	if len(x) > 256 {
		h := (len(x) / 2) &^ 63
		return sumContig(x[:h]) + sumContig(x[h:])
	}
	var s0, s1, s2, s3 float64
	for len(x) >= 4 {
		s0 += float64(x[0])
		s1 += float64(x[1])
		s2 += float64(x[2])
		s3 += float64(x[3])
		x = x[4:]
	}
	for _, v := range x {
		s0 += float64(v)
	}
	return (s0 + s1) + (s2 + s3)
}

// maxRun folds x[p], x[p+s], … (n elements) into best. A NaN, once met,
// stays.
func maxRun[T Float](x []T, p, n, s int, best T) T {
	if s == 1 {
		for _, v := range x[p : p+n] {
			if v > best {
				best = v
			} else if v != v {
				return v
			}
		}
		return best
	}
	for ; n > 0; n-- {
		if v := x[p]; v > best {
			best = v
		} else if v != v {
			return v
		}
		p += s
	}
	return best
}

// minRun is maxRun for the minimum.
func minRun[T Float](x []T, p, n, s int, best T) T {
	if s == 1 {
		for _, v := range x[p : p+n] {
			if v < best {
				best = v
			} else if v != v {
				return v
			}
		}
		return best
	}
	for ; n > 0; n-- {
		if v := x[p]; v < best {
			best = v
		} else if v != v {
			return v
		}
		p += s
	}
	return best
}

// argMaxRun folds x[p], x[p+s], … (n elements, flat indices r, r+1, …) into
// (best, bi): the first strictly greater value wins, and the first NaN wins
// over everything.
func argMaxRun[T Float](x []T, p, n, s, r int, best T, bi int) (T, int) {
	if best != best {
		return best, bi
	}
	for t := 0; t < n; t++ {
		if v := x[p]; v > best {
			best, bi = v, r+t
		} else if v != v {
			return v, r + t
		}
		p += s
	}
	return best, bi
}

// argMinRun is argMaxRun for the minimum.
func argMinRun[T Float](x []T, p, n, s, r int, best T, bi int) (T, int) {
	if best != best {
		return best, bi
	}
	for t := 0; t < n; t++ {
		if v := x[p]; v < best {
			best, bi = v, r+t
		} else if v != v {
			return v, r + t
		}
		p += s
	}
	return best, bi
}

// reduceOuter reduces elements [rLo, rHi) of the reduced extent for a block
// of len(val) outputs whose elements lie at base + c·ks (plus the reduced
// offset): for each reduced element in order, the whole row of outputs is
// folded into val (and idx for ArgMax/ArgMin). Contiguous sums whose
// accumulators do not fit in L1 fold four rows per pass over them (measured:
// 2× faster at 8192 columns, but 1.4× slower at 1024, where one row per pass
// streams better).
func reduceOuter[T Float](op backend.ReduceOp, x []T, rc *redCursor, rLo, rHi, base, ks int, val []float64, idx []int) {
	inner, s := rc.inner, rc.stride
	m := len(val)
	rc.seek(rLo / inner)
	j := rLo % inner
	first := true
	if op == backend.ReduceSum {
		clear(val)
		first = false
	}
	for r := rLo; r < rHi; {
		n := min(inner-j, rHi-r)
		p := base + rc.off + j*s // the run's first row
		t := 0
		if first {
			for c := range val {
				val[c] = float64(x[p+c*ks])
			}
			for c := range idx {
				idx[c] = r
			}
			first = false
			t = 1
		}
		if op == backend.ReduceSum && ks == 1 && m > outerL1Columns {
			for ; t+4 <= n; t += 4 {
				q := p + t*s
				r0, r1 := x[q:q+m], x[q+s:q+s+m]
				r2, r3 := x[q+2*s:q+2*s+m], x[q+3*s:q+3*s+m]
				r0, r1, r2, r3 = r0[:len(val)], r1[:len(val)], r2[:len(val)], r3[:len(val)]
				for c := range val {
					val[c] += (float64(r0[c]) + float64(r1[c])) + (float64(r2[c]) + float64(r3[c]))
				}
			}
		}
		for ; t < n; t++ {
			reduceOuterRow(op, x, p+t*s, ks, val, idx, r+t)
		}
		r += n
		j = 0
		rc.next()
	}
}

// reduceOuterRow folds the row of outputs at x[p + c·ks] (element ri of the
// reduced extent) into val and idx.
func reduceOuterRow[T Float](op backend.ReduceOp, x []T, p, ks int, val []float64, idx []int, ri int) {
	switch op {
	case backend.ReduceSum:
		if ks == 1 {
			row := x[p : p+len(val)]
			for c := range val {
				val[c] += float64(row[c])
			}
			return
		}
		for c := range val {
			val[c] += float64(x[p+c*ks])
		}
	case backend.ReduceMax:
		for c := range val {
			v := float64(x[p+c*ks])
			if best := val[c]; v > best || (v != v && best == best) {
				val[c] = v
			}
		}
	case backend.ReduceMin:
		for c := range val {
			v := float64(x[p+c*ks])
			if best := val[c]; v < best || (v != v && best == best) {
				val[c] = v
			}
		}
	case backend.ReduceArgMax:
		for c := range val {
			v := float64(x[p+c*ks])
			if best := val[c]; v > best || (v != v && best == best) {
				val[c], idx[c] = v, ri
			}
		}
	case backend.ReduceArgMin:
		for c := range val {
			v := float64(x[p+c*ks])
			if best := val[c]; v < best || (v != v && best == best) {
				val[c], idx[c] = v, ri
			}
		}
	}
}
