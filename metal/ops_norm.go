package metal

// RMSNorm, RMSNormBackward, LayerNorm and LayerNormBackward
// (kernels/norm.metal): row kernels, one row per threadgroup or, for short
// rows, one row per simdgroup; the weight and bias gradients are column
// sums over fixed row blocks (partials, then a second pass in block order),
// so they are deterministic without atomics.

import (
	"fmt"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/driver"
)

var (
	kRMSNorm       = kernels.Name("rms_norm", "f32")
	kRMSNormBack   = kernels.Name("rms_norm", "backward", "f32")
	kLayerNorm     = kernels.Name("layer_norm", "f32")
	kLayerNormBack = kernels.Name("layer_norm", "backward", "f32")
	kNormParamGrad = kernels.Name("norm", "param", "grad", "f32")
	kNormColSum    = kernels.Name("norm", "col", "sum", "f32")
)

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
func (b *Backend) runNormRows(kernel, label string, n, c int, consts []driver.Constant, args ...driver.Arg) {
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

// normParamGrads writes dw and db (where their Buf is not nil) as column
// sums over the n rows of dy·x̂ and dy; layer selects x̂ = (x−μ)·rstd.
func (b *Backend) normParamGrads(label string, layer bool, dw, db, dy, x, mean, rstd backend.View, n, c int) {
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
	tx := rowThreads(c, 256, b.pipelineFor(key).MaxThreads(), 32)
	b.run(label+".partials", key, [3]int{(c + tx - 1) / tx, nb, 1}, [3]int{tx, 1, 1},
		b.arg(backend.View{Buf: part}), b.arg(dy), b.arg(x), b.arg(mean), b.arg(rstd), bytesArg(p))
	sumKey := pkey(kNormColSum)
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
// saving rstd (N) where its Buf is not nil. w may have a nil Buf.
func (b *Backend) RMSNorm(y, rstd, x, w backend.View, eps float64) {
	checkKernelDType(kRMSNorm, onlyF32, y, rstd, x, w)
	n, c := normDims(kRMSNorm, x, y, rstd, w)
	if n == 0 {
		return
	}
	checkCount(kRMSNorm, n*c)
	p := normParams{Rows: uint32(n), Cols: uint32(c), Eps: float32(eps)}
	if rstd.Buf != nil {
		p.Save = 2
	}
	b.runNormRows(kRMSNorm, kRMSNorm, n, c, []driver.Constant{cBool(1, w.Buf != nil)},
		b.arg(y), b.arg(rstd), b.arg(x), b.arg(w), bytesArg(p))
}

// RMSNormBackward writes dx (N, C) and, where its Buf is not nil, dw (C)
// from dy, x, w (nil Buf: no weight) and the saved rstd.
func (b *Backend) RMSNormBackward(dx, dw, dy, x, w, rstd backend.View) {
	checkKernelDType(kRMSNormBack, onlyF32, dx, dw, dy, x, w, rstd)
	n, c := normDims(kRMSNormBack, x, dx, dw, dy, w, rstd)
	if c == 0 {
		return
	}
	checkCount(kRMSNormBack, n*c)
	if n > 0 && dx.Buf != nil {
		p := normParams{Rows: uint32(n), Cols: uint32(c)}
		b.runNormRows(kRMSNormBack, kRMSNormBack, n, c, []driver.Constant{cBool(1, w.Buf != nil)},
			b.arg(dx), b.arg(dy), b.arg(x), b.arg(w), b.arg(rstd), bytesArg(p))
	}
	b.normParamGrads(kRMSNormBack, false, dw, backend.View{}, dy, x, backend.View{}, rstd, n, c)
}

// LayerNorm writes y = (x−mean)·rstd·w + b per row of x (N, C), saving mean
// and rstd (N) where their Buf is not nil. w and b may have a nil Buf.
func (b *Backend) LayerNorm(y, mean, rstd, x, w, bias backend.View, eps float64) {
	checkKernelDType(kLayerNorm, onlyF32, y, mean, rstd, x, w, bias)
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
	b.runNormRows(kLayerNorm, kLayerNorm, n, c, []driver.Constant{cBool(1, w.Buf != nil), cBool(2, bias.Buf != nil)},
		b.arg(y), b.arg(mean), b.arg(rstd), b.arg(x), b.arg(w), b.arg(bias), bytesArg(p))
}

// LayerNormBackward writes dx (N, C), and dw, db (C) where their Buf is not
// nil, from dy, x, w (nil Buf: no affine) and the saved mean and rstd.
func (b *Backend) LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd backend.View) {
	checkKernelDType(kLayerNormBack, onlyF32, dx, dw, db, dy, x, w, mean, rstd)
	n, c := normDims(kLayerNormBack, x, dx, dw, db, dy, w, mean, rstd)
	if c == 0 {
		return
	}
	checkCount(kLayerNormBack, n*c)
	if n > 0 && dx.Buf != nil {
		p := normParams{Rows: uint32(n), Cols: uint32(c)}
		b.runNormRows(kLayerNormBack, kLayerNormBack, n, c, []driver.Constant{cBool(1, w.Buf != nil)},
			b.arg(dx), b.arg(dy), b.arg(x), b.arg(w), b.arg(mean), b.arg(rstd), bytesArg(p))
	}
	b.normParamGrads(kLayerNormBack, true, dw, db, dy, x, mean, rstd, n, c)
}
