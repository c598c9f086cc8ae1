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

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/driver"
)

// normNames are the norm kernels of one dtype: float32 (every view
// float32) or the call's 16-bit dtype.
type normNames struct {
	rms, rmsBack, layer, layerBack, paramGrad, colSum string
}

// normByDType holds the kernel names by dtype (built once), indexed by
// Float32, Float16 or BFloat16.
var normByDType = func() (t [backend.BFloat16 + 1]normNames) {
	for _, dt := range floatTypes {
		tag := dtypeTag(dt)
		t[dt] = normNames{
			rms:       kernels.Name("rms_norm", tag),
			rmsBack:   kernels.Name("rms_norm", "backward", tag),
			layer:     kernels.Name("layer_norm", tag),
			layerBack: kernels.Name("layer_norm", "backward", tag),
			paramGrad: kernels.Name("norm", "param", "grad", tag),
			colSum:    kernels.Name("norm", "col", "sum", tag),
		}
	}
	return t
}()

// The float32 kernels (also the names the ops' panics give).
var (
	kRMSNorm       = normByDType[backend.Float32].rms
	kRMSNormBack   = normByDType[backend.Float32].rmsBack
	kLayerNorm     = normByDType[backend.Float32].layer
	kLayerNormBack = normByDType[backend.Float32].layerBack
	kNormParamGrad = normByDType[backend.Float32].paramGrad
	kNormColSum    = normByDType[backend.Float32].colSum
)

// normArg is a view of a norm call with its parameter name (for the dtype
// checks' messages).
type normArg struct {
	name string
	v    backend.View
}

// normDTypeList describes the given views' dtypes: "x float16, y float32".
func normDTypeList(args []normArg) string {
	var s string
	for _, a := range args {
		if a.v.Buf == nil {
			continue
		}
		if s != "" {
			s += ", "
		}
		s += a.name + " " + a.v.DType().String()
	}
	return s
}

// normCheckDTypes checks the dtypes of a norm call: stats (mean, rstd)
// float32; data float32, float16 or bfloat16 with at most one 16-bit dtype
// among them; and within each group of same the views given share one
// dtype. It returns the call's 16-bit dtype, Float32 if there is none.
// Views with a nil Buf are absent and not checked. The panics name the
// kernel and every view's dtype.
func normCheckDTypes(kernel string, stats, data []normArg, same ...[]normArg) backend.DType {
	for _, list := range [2][]normArg{data, stats} {
		for _, a := range list {
			if a.v.Buf != nil && a.v.DType() == backend.Float64 {
				panic(errFloat64(kernel))
			}
		}
	}
	fail := func(why string, args ...any) {
		all := append(append([]normArg(nil), data...), stats...)
		panic(fmt.Sprintf("metal: %s: dtypes %s: %s", kernel, normDTypeList(all), fmt.Sprintf(why, args...)))
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

// normRowKernel returns a row kernel (pick of normByDType[h], h the call's
// 16-bit dtype) and the dtype constants 6–8 to append to its key; the
// float32 kernel, without them, when no view it reads or writes is 16-bit.
func normRowKernel(h backend.DType, pick func(normNames) string, x16, y16, w16 bool) (string, []driver.Constant) {
	if !x16 && !y16 && !w16 {
		return pick(normByDType[backend.Float32]), nil
	}
	return pick(normByDType[h]), []driver.Constant{cBool(6, x16), cBool(7, y16), cBool(8, w16)}
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
	c = 1
	if len(x.Shape) > 0 {
		c = x.Shape[len(x.Shape)-1]
	}
	if c == 0 {
		return 0, 0
	}
	return x.Numel() / c, c
}

// runNormRows launches a row kernel over n rows of c: the key's constant 0
// (norm_simd_rows) is chosen here and prepended to consts.
func (b *Backend) runNormRows(kernel, label string, n, c int, consts []driver.Constant, args ...kernelArg) {
	simdRows := c <= normSimdRowsMax
	key := pkey(kernel, append([]driver.Constant{cBool(0, simdRows)}, consts...)...)
	pipe := b.pipelineFor(key)
	simd := pipe.SIMDWidth()
	if simd != 32 {
		panic(fmt.Sprintf("metal: %s: SIMD width %d; the kernel's butterflies assume 32", kernel, simd))
	}
	var groups, threads [3]int
	if simdRows {
		per := max(1, min(normRowsPerGroup, pipe.MaxThreads()/simd))
		groups = rowGrid((n + per - 1) / per)
		threads = [3]int{per * simd, 1, 1}
	} else {
		groups = rowGrid(n)
		threads = [3]int{rowThreads(c, 256, pipe.MaxThreads(), simd), 1, 1}
	}
	b.run(label, key, groups, threads, args...)
}

// normBlocking is the fixed row blocking of a weight/bias gradient of
// (n, c): nb blocks of rb rows. It depends on n and c only.
func normBlocking(n, c int) (nb, rb int) {
	want := max(1, min(1024, (1<<16)/max(c, 1)))
	rb = max(1, (n+want-1)/want)
	return (n + rb - 1) / rb, rb
}

// normParamGrads writes dw and db (where their Buf is not nil; one dtype)
// as column sums over the n rows of dy·x̂ and dy; layer selects
// x̂ = (x−μ)·rstd. h is the call's 16-bit dtype (Float32 if none): dy and
// x are read as they are (float32 partials), the sums rounded once to dw's
// dtype.
func (b *Backend) normParamGrads(label string, h backend.DType, layer bool, dw, db, dy, x, mean, rstd backend.View, n, c int) {
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
	k := 0
	if wantW {
		k++
	}
	if wantB {
		k++
	}
	checkCount(label, 2*nb*c*k)
	part := b.Alloc(backend.Float32, 2*nb*c*k) // per gradient: partial sums, compensations
	defer b.Free(part)
	p := normParams{Rows: uint32(n), Cols: uint32(c), NBlocks: uint32(nb), Block: uint32(rb)}
	key := pkey(kNormParamGrad, cBool(3, layer), cBool(4, wantW), cBool(5, wantB))
	if x16, y16 := normIsHalf(x), normIsHalf(dy); x16 || y16 {
		key = pkey(normByDType[h].paramGrad, cBool(3, layer), cBool(4, wantW), cBool(5, wantB), cBool(6, x16), cBool(7, y16))
	}
	tx := rowThreads(c, 256, b.pipelineFor(key).MaxThreads(), 32)
	b.run(label+".partials", key, [3]int{(c + tx - 1) / tx, nb, 1}, [3]int{tx, 1, 1},
		b.arg(backend.View{Buf: part}), b.arg(dy), b.arg(x), b.arg(mean), b.arg(rstd), bytesArg(p))
	gdt := dw
	if !wantW {
		gdt = db
	}
	sumKey := pkey(normByDType[gdt.DType()].colSum)
	ts := rowThreads(c, 256, b.pipelineFor(sumKey).MaxThreads(), 32)
	off := 0
	for _, v := range []backend.View{dw, db} {
		if v.Buf == nil {
			continue
		}
		b.run(label+".sum", sumKey, [3]int{(c + ts - 1) / ts, 1, 1}, [3]int{ts, 1, 1},
			b.arg(v), b.arg(backend.View{Buf: part, Offset: off}), bytesArg(p))
		off += 2 * nb * c
	}
}

// RMSNorm writes y = x·rstd·w, rstd = 1/√(mean(x²)+eps) per row of x (N, C),
// saving rstd (N) where its Buf is not nil. w may have a nil Buf. x, y and
// w may be 16-bit (see the file comment).
func (b *Backend) RMSNorm(y, rstd, x, w backend.View, eps float64) {
	h := normCheckDTypes(kRMSNorm, []normArg{{"rstd", rstd}},
		[]normArg{{"y", y}, {"x", x}, {"w", w}})
	n, c := normDims(kRMSNorm, x, y, rstd, w)
	if n == 0 {
		return
	}
	checkCount(kRMSNorm, n*c)
	p := normParams{Rows: uint32(n), Cols: uint32(c), Eps: float32(eps)}
	if rstd.Buf != nil {
		p.Save = 2
	}
	kernel, dts := normRowKernel(h, func(k normNames) string { return k.rms }, normIsHalf(x), normIsHalf(y), normIsHalf(w))
	b.runNormRows(kernel, kernel, n, c, append([]driver.Constant{cBool(1, w.Buf != nil)}, dts...),
		b.arg(y), b.arg(rstd), b.arg(x), b.arg(w), bytesArg(p))
}

// RMSNormBackward writes dx (N, C) and, where its Buf is not nil, dw (C)
// from dy, x, w (nil Buf: no weight) and the saved rstd. dx has x's dtype,
// dw w's; 16-bit views as in the file comment.
func (b *Backend) RMSNormBackward(dx, dw, dy, x, w, rstd backend.View) {
	h := normCheckDTypes(kRMSNormBack, []normArg{{"rstd", rstd}},
		[]normArg{{"dx", dx}, {"dw", dw}, {"dy", dy}, {"x", x}, {"w", w}},
		[]normArg{{"x", x}, {"dx", dx}}, []normArg{{"w", w}, {"dw", dw}})
	n, c := normDims(kRMSNormBack, x, dx, dw, dy, w, rstd)
	if c == 0 {
		return
	}
	checkCount(kRMSNormBack, n*c)
	if n > 0 && dx.Buf != nil {
		p := normParams{Rows: uint32(n), Cols: uint32(c)}
		kernel, dts := normRowKernel(h, func(k normNames) string { return k.rmsBack }, normIsHalf(x), normIsHalf(dy), normIsHalf(w))
		b.runNormRows(kernel, kernel, n, c, append([]driver.Constant{cBool(1, w.Buf != nil)}, dts...),
			b.arg(dx), b.arg(dy), b.arg(x), b.arg(w), b.arg(rstd), bytesArg(p))
	}
	b.normParamGrads(kRMSNormBack, h, false, dw, backend.View{}, dy, x, backend.View{}, rstd, n, c)
}

// LayerNorm writes y = (x−mean)·rstd·w + b per row of x (N, C), saving mean
// and rstd (N) where their Buf is not nil. w and b may have a nil Buf. x,
// y, w and b may be 16-bit (see the file comment).
func (b *Backend) LayerNorm(y, mean, rstd, x, w, bias backend.View, eps float64) {
	h := normCheckDTypes(kLayerNorm, []normArg{{"mean", mean}, {"rstd", rstd}},
		[]normArg{{"y", y}, {"x", x}, {"w", w}, {"b", bias}},
		[]normArg{{"w", w}, {"b", bias}})
	n, c := normDims(kLayerNorm, x, y, mean, rstd, w, bias)
	if n == 0 {
		return
	}
	checkCount(kLayerNorm, n*c)
	p := normParams{Rows: uint32(n), Cols: uint32(c), Eps: float32(eps)}
	if mean.Buf != nil {
		p.Save |= 1
	}
	if rstd.Buf != nil {
		p.Save |= 2
	}
	kernel, dts := normRowKernel(h, func(k normNames) string { return k.layer },
		normIsHalf(x), normIsHalf(y), normIsHalf(w) || normIsHalf(bias))
	b.runNormRows(kernel, kernel, n, c, append([]driver.Constant{cBool(1, w.Buf != nil), cBool(2, bias.Buf != nil)}, dts...),
		b.arg(y), b.arg(mean), b.arg(rstd), b.arg(x), b.arg(w), b.arg(bias), bytesArg(p))
}

// LayerNormBackward writes dx (N, C), and dw, db (C) where their Buf is not
// nil, from dy, x, w (nil Buf: no affine) and the saved mean and rstd. dx
// has x's dtype, dw and db w's; 16-bit views as in the file comment.
func (b *Backend) LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd backend.View) {
	h := normCheckDTypes(kLayerNormBack, []normArg{{"mean", mean}, {"rstd", rstd}},
		[]normArg{{"dx", dx}, {"dw", dw}, {"db", db}, {"dy", dy}, {"x", x}, {"w", w}},
		[]normArg{{"x", x}, {"dx", dx}}, []normArg{{"w", w}, {"dw", dw}, {"db", db}})
	n, c := normDims(kLayerNormBack, x, dx, dw, db, dy, w, mean, rstd)
	if c == 0 {
		return
	}
	checkCount(kLayerNormBack, n*c)
	if n > 0 && dx.Buf != nil {
		p := normParams{Rows: uint32(n), Cols: uint32(c)}
		kernel, dts := normRowKernel(h, func(k normNames) string { return k.layerBack }, normIsHalf(x), normIsHalf(dy), normIsHalf(w))
		b.runNormRows(kernel, kernel, n, c, append([]driver.Constant{cBool(1, w.Buf != nil)}, dts...),
			b.arg(dx), b.arg(dy), b.arg(x), b.arg(w), b.arg(mean), b.arg(rstd), bytesArg(p))
	}
	b.normParamGrads(kLayerNormBack, h, true, dw, db, dy, x, mean, rstd, n, c)
}
