package metal

// RMSNorm, RMSNormBackward, LayerNorm and LayerNormBackward
// (kernels/norm.metal): row kernels, one row per threadgroup or, for short
// rows, one row per simdgroup; the weight and bias gradients are column
// sums over fixed row blocks (partials, then a second pass in block order),
// so they are deterministic without atomics.
//
// Dtypes (mixed precision). All arithmetic is float32. x and y (forward)
// are each float32, float16 or bfloat16, independently; w and b are
// float32 or the 16-bit dtype (b, when both are given, w's dtype); at most
// one 16-bit dtype appears among a call's views; mean and rstd are float32.
// In the backward dx has x's dtype, dy is float32 or the 16-bit dtype (y's),
// dw and db have w's dtype (one dtype, when several of w, dw, db are given).
// 16-bit inputs are widened on load and each 16-bit output is rounded once
// on store (the column sums of dw and db at the very end). A call with
// every view float32 runs the float32 kernels (*_f32); one with a 16-bit
// view runs that dtype's kernels (*_f16, *_bf16), told by function
// constants 6–8 which views are 16-bit. Any other combination panics.

import (
	"fmt"
	"slices"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/metal/driver"
)

var (
	kRMSNormBy       = namesByDType("rms_norm")
	kRMSNormBackBy   = namesByDType("rms_norm", "backward")
	kLayerNormBy     = namesByDType("layer_norm")
	kLayerNormBackBy = namesByDType("layer_norm", "backward")
	kNormParamGradBy = namesByDType("norm", "param", "grad")
	kNormColSumBy    = namesByDType("norm", "col", "sum")

	// The ops' names in panics: their float32 kernels.
	kRMSNorm       = kRMSNormBy[backend.Float32]
	kRMSNormBack   = kRMSNormBackBy[backend.Float32]
	kLayerNorm     = kLayerNormBy[backend.Float32]
	kLayerNormBack = kLayerNormBackBy[backend.Float32]
)

// normKind is RMSNorm or LayerNorm: its row kernels, its names in panics
// and the dispatch labels of its weight/bias gradient passes (built once).
type normKind struct {
	layer            bool     // x̂ = (x−μ)·rstd (LayerNorm) rather than x·rstd
	fwd, back        *byDType // the row kernels by dtype
	fwdOp, backOp    string   // fwd[Float32], back[Float32]
	partials, colSum string   // labels: backOp+".partials", backOp+".sum"
}

func newNormKind(layer bool, fwd, back *byDType) normKind {
	b := back[backend.Float32]
	return normKind{layer: layer, fwd: fwd, back: back, fwdOp: fwd[backend.Float32], backOp: b,
		partials: b + ".partials", colSum: b + ".sum"}
}

var (
	rmsNorm   = newNormKind(false, &kRMSNormBy, &kRMSNormBackBy)
	layerNorm = newNormKind(true, &kLayerNormBy, &kLayerNormBackBy)
)

// normCheckDTypes checks the dtypes of a norm call: stats (mean, rstd)
// float32; data float32, float16 or bfloat16 with at most one 16-bit dtype
// among them; and within each group of same the views given share one
// dtype. It returns the call's 16-bit dtype, Float32 if there is none.
// Views with a nil Buf are absent and not checked. The panics name the
// kernel and every view's dtype.
func normCheckDTypes(kernel string, stats, data []namedView, same ...[]namedView) backend.DType {
	for _, list := range [2][]namedView{data, stats} {
		for _, a := range list {
			if a.v.Buf != nil && a.v.DType() == backend.Float64 {
				panic(errFloat64(kernel))
			}
		}
	}
	fail := func(why string, args ...any) {
		all := append(append([]namedView(nil), data...), stats...)
		panic(fmt.Sprintf("metal: %s: dtypes %s: %s", kernel, dtypeList(all, ""), fmt.Sprintf(why, args...)))
	}
	for _, a := range stats {
		if a.v.Buf != nil && a.v.DType() != backend.Float32 {
			fail("%s must be float32", a.name)
		}
	}
	h := backend.Float32
	for _, a := range data {
		if a.v.Buf == nil {
			continue
		}
		switch dt := a.v.DType(); {
		case dt == backend.Float32:
		case !dt.IsHalf():
			fail("%s must be float32, float16 or bfloat16", a.name)
		case h != backend.Float32 && dt != h:
			fail("float16 and bfloat16 in one call (at most one 16-bit dtype)")
		default:
			h = dt
		}
	}
	for _, g := range same {
		first := -1
		for i, a := range g {
			if a.v.Buf == nil {
				continue
			}
			if first < 0 {
				first = i
			} else if a.v.DType() != g[first].v.DType() {
				fail("%s must have %s's dtype", a.name, g[first].name)
			}
		}
	}
	return h
}

// normIsHalf reports whether v is given and 16-bit.
func normIsHalf(v backend.View) bool { return v.Buf != nil && v.DType().IsHalf() }

// normKey is the key of norm kernel t with consts: t[Float32] when none
// of halves is set (no view the kernel reads or writes is 16-bit), else
// t[h] (h the call's 16-bit dtype), told by constants 6, 7, … which views
// are 16-bit.
func normKey(t *byDType, h backend.DType, consts []driver.Constant, halves ...bool) driver.PipelineKey {
	cs := make([]driver.Constant, 0, len(consts)+len(halves))
	cs = append(cs, consts...)
	kernel := t[backend.Float32]
	if slices.Contains(halves, true) {
		kernel = t[h]
		for i, x := range halves {
			cs = append(cs, cBool(6+i, x))
		}
	}
	return pkey(kernel, cs...)
}

// normParams mirrors NormParams in kernels/norm.metal.
type normParams struct {
	Rows, Cols uint32
	Eps        float32
	Save       uint32 // bit 0: write mean, bit 1: write rstd
	NBlocks    uint32
	Block      uint32
}

// normSimdRowsMax is the longest row a simdgroup normalises on its own;
// longer rows take a whole threadgroup.
const normSimdRowsMax = 512

// normRowsPerGroup is the number of simdgroups (rows) of a threadgroup in
// the one-row-per-simdgroup mode.
const normRowsPerGroup = 8

// normDims returns the rows and columns of x (N, C) with its last axis as
// C, checking that every view is contiguous.
func normDims(kernel string, x backend.View, views ...backend.View) (n, c int) {
	for _, v := range append([]backend.View{x}, views...) {
		if v.Buf != nil && !v.IsContiguous() {
			panic(fmt.Sprintf("metal: %s: view %v with strides %v is not contiguous", kernel, v.Shape, v.Strides))
		}
	}
	return lastAxisRows(x)
}

// normSimdRows reports whether rows of c run one per simdgroup (constant
// 0 of the row kernels, norm_simd_rows) rather than one per threadgroup.
func normSimdRows(c int) bool { return c <= normSimdRowsMax }

// runNormRows launches the row kernel of key (its constant 0
// normSimdRows(c)) over n rows of c.
func (b *Backend) runNormRows(key driver.PipelineKey, n, c int, args ...kernelArg) {
	pipe := b.pipelineFor(key)
	simd := pipe.SIMDWidth()
	if simd != 32 {
		panic(fmt.Sprintf("metal: %s: SIMD width %d; the kernel's butterflies assume 32", key.Kernel, simd))
	}
	var groups, threads [3]int
	if normSimdRows(c) {
		per := max(1, min(normRowsPerGroup, pipe.MaxThreads()/simd))
		groups = rowGrid((n + per - 1) / per)
		threads = [3]int{per * simd, 1, 1}
	} else {
		groups = rowGrid(n)
		threads = [3]int{rowThreads(c, 256, pipe.MaxThreads(), simd), 1, 1}
	}
	b.runPipe(key.Kernel, key, pipe, groups, threads, args...)
}

// normBlocking is the fixed row blocking of a weight/bias gradient of
// (n, c): nb blocks of rb rows. It depends on n and c only.
func normBlocking(n, c int) (nb, rb int) {
	want := max(1, min(1024, (1<<16)/max(c, 1)))
	rb = max(1, (n+want-1)/want)
	return (n + rb - 1) / rb, rb
}

// normParamGrads writes dw and db (where their Buf is not nil; one dtype)
// as column sums over the n rows of dy·x̂ and dy, x̂ as norm k defines it.
// h is the call's 16-bit dtype (Float32 if none): dy and x are read as
// they are (float32 partials), the sums rounded once to dw's dtype.
func (b *Backend) normParamGrads(k *normKind, h backend.DType, dw, db, dy, x, mean, rstd backend.View, n, c int) {
	wantW, wantB := dw.Buf != nil, db.Buf != nil
	if !wantW && !wantB {
		return
	}
	if n == 0 {
		for _, v := range []backend.View{dw, db} {
			if v.Buf != nil {
				b.Fill(backend.View{Buf: v.Buf, Offset: v.Offset, Shape: []int{c}, Strides: []int{1}}, 0)
			}
		}
		return
	}
	nb, rb := normBlocking(n, c)
	ng := 0 // gradients wanted
	if wantW {
		ng++
	}
	if wantB {
		ng++
	}
	checkCount(k.backOp, 2*nb*c*ng)
	part := b.Alloc(backend.Float32, 2*nb*c*ng) // per gradient: partial sums, compensations
	defer b.Free(part)
	p := normParams{Rows: uint32(n), Cols: uint32(c), NBlocks: uint32(nb), Block: uint32(rb)}
	key := normKey(&kNormParamGradBy, h, []driver.Constant{cBool(3, k.layer), cBool(4, wantW), cBool(5, wantB)},
		normIsHalf(x), normIsHalf(dy))
	px := b.pipelineFor(key)
	tx := rowThreads(c, 256, px.MaxThreads(), 32)
	b.runPipe(k.partials, key, px, [3]int{(c + tx - 1) / tx, nb, 1}, [3]int{tx, 1, 1},
		b.arg(backend.View{Buf: part}), b.arg(dy), b.arg(x), b.arg(mean), b.arg(rstd), bytesArg(p))
	gdt := dw
	if !wantW {
		gdt = db
	}
	sumKey := pkey(kNormColSumBy[gdt.DType()])
	ps := b.pipelineFor(sumKey)
	ts := rowThreads(c, 256, ps.MaxThreads(), 32)
	off := 0
	for _, v := range []backend.View{dw, db} {
		if v.Buf == nil {
			continue
		}
		b.runPipe(k.colSum, sumKey, ps, [3]int{(c + ts - 1) / ts, 1, 1}, [3]int{ts, 1, 1},
			b.arg(v), b.arg(backend.View{Buf: part, Offset: off}), bytesArg(p))
		off += 2 * nb * c
	}
}

// normForward writes y and, where their Buf is not nil, the saved mean
// (LayerNorm only) and rstd of norm k per row of x, with the weight w and
// the bias (LayerNorm only; nil Bufs: none). h is the call's 16-bit dtype
// (Float32 if none).
func (b *Backend) normForward(k *normKind, h backend.DType, y, mean, rstd, x, w, bias backend.View, eps float64) {
	n, c := normDims(k.fwdOp, x, y, mean, rstd, w, bias)
	if n == 0 {
		return
	}
	checkCount(k.fwdOp, n*c)
	p := normParams{Rows: uint32(n), Cols: uint32(c), Eps: float32(eps)}
	if mean.Buf != nil {
		p.Save |= 1
	}
	if rstd.Buf != nil {
		p.Save |= 2
	}
	// Constants 0 (norm_simd_rows), 1 (w given) and, for LayerNorm, 2 (b
	// given).
	consts := []driver.Constant{cBool(0, normSimdRows(c)), cBool(1, w.Buf != nil), cBool(2, bias.Buf != nil)}
	if !k.layer {
		consts = consts[:2]
	}
	key := normKey(k.fwd, h, consts, normIsHalf(x), normIsHalf(y), normIsHalf(w) || normIsHalf(bias))
	if k.layer {
		b.runNormRows(key, n, c, b.arg(y), b.arg(mean), b.arg(rstd), b.arg(x), b.arg(w), b.arg(bias), bytesArg(p))
	} else {
		b.runNormRows(key, n, c, b.arg(y), b.arg(rstd), b.arg(x), b.arg(w), bytesArg(p))
	}
}

// normBackward writes dx (N, C) where its Buf is not nil, and dw, db (C)
// where theirs are not (db: LayerNorm only), from dy, x, w (nil Buf: no
// weight) and the saved mean (LayerNorm only) and rstd of norm k. h is
// the call's 16-bit dtype (Float32 if none).
func (b *Backend) normBackward(k *normKind, h backend.DType, dx, dw, db, dy, x, w, mean, rstd backend.View) {
	n, c := normDims(k.backOp, x, dx, dw, db, dy, w, mean, rstd)
	if c == 0 {
		return
	}
	checkCount(k.backOp, n*c)
	if n > 0 && dx.Buf != nil {
		p := normParams{Rows: uint32(n), Cols: uint32(c)}
		key := normKey(k.back, h, []driver.Constant{cBool(0, normSimdRows(c)), cBool(1, w.Buf != nil)},
			normIsHalf(x), normIsHalf(dy), normIsHalf(w))
		if k.layer {
			b.runNormRows(key, n, c, b.arg(dx), b.arg(dy), b.arg(x), b.arg(w), b.arg(mean), b.arg(rstd), bytesArg(p))
		} else {
			b.runNormRows(key, n, c, b.arg(dx), b.arg(dy), b.arg(x), b.arg(w), b.arg(rstd), bytesArg(p))
		}
	}
	b.normParamGrads(k, h, dw, db, dy, x, mean, rstd, n, c)
}

// RMSNorm writes y = x·rstd·w, rstd = 1/√(mean(x²)+eps) per row of x (N, C),
// saving rstd (N) where its Buf is not nil. w may have a nil Buf. x, y and
// w may be 16-bit (see the file comment).
func (b *Backend) RMSNorm(y, rstd, x, w backend.View, eps float64) {
	h := normCheckDTypes(kRMSNorm, []namedView{{"rstd", rstd}},
		[]namedView{{"y", y}, {"x", x}, {"w", w}})
	b.normForward(&rmsNorm, h, y, backend.View{}, rstd, x, w, backend.View{}, eps)
}

// RMSNormBackward writes dx (N, C) and, where its Buf is not nil, dw (C)
// from dy, x, w (nil Buf: no weight) and the saved rstd. dx has x's dtype,
// dw w's; 16-bit views as in the file comment.
func (b *Backend) RMSNormBackward(dx, dw, dy, x, w, rstd backend.View) {
	h := normCheckDTypes(kRMSNormBack, []namedView{{"rstd", rstd}},
		[]namedView{{"dx", dx}, {"dw", dw}, {"dy", dy}, {"x", x}, {"w", w}},
		[]namedView{{"x", x}, {"dx", dx}}, []namedView{{"w", w}, {"dw", dw}})
	b.normBackward(&rmsNorm, h, dx, dw, backend.View{}, dy, x, w, backend.View{}, rstd)
}

// LayerNorm writes y = (x−mean)·rstd·w + b per row of x (N, C), saving mean
// and rstd (N) where their Buf is not nil. w and b may have a nil Buf. x,
// y, w and b may be 16-bit (see the file comment).
func (b *Backend) LayerNorm(y, mean, rstd, x, w, bias backend.View, eps float64) {
	h := normCheckDTypes(kLayerNorm, []namedView{{"mean", mean}, {"rstd", rstd}},
		[]namedView{{"y", y}, {"x", x}, {"w", w}, {"b", bias}},
		[]namedView{{"w", w}, {"b", bias}})
	b.normForward(&layerNorm, h, y, mean, rstd, x, w, bias, eps)
}

// LayerNormBackward writes dx (N, C), and dw, db (C) where their Buf is not
// nil, from dy, x, w (nil Buf: no affine) and the saved mean and rstd. dx
// has x's dtype, dw and db w's; 16-bit views as in the file comment.
func (b *Backend) LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd backend.View) {
	h := normCheckDTypes(kLayerNormBack, []namedView{{"mean", mean}, {"rstd", rstd}},
		[]namedView{{"dx", dx}, {"dw", dw}, {"db", db}, {"dy", dy}, {"x", x}, {"w", w}},
		[]namedView{{"x", x}, {"dx", dx}}, []namedView{{"w", w}, {"dw", dw}, {"db", db}})
	b.normBackward(&layerNorm, h, dx, dw, db, dy, x, w, mean, rstd)
}
