package cpu

import (
	"math"

	"github.com/forgeml/forge/forge/backend"
)

// Layer and RMS normalisation over the last axis: x (N, C), one row at a
// time, statistics in float64.
//
// The weight and bias gradients sum over rows. To keep them deterministic and
// still parallel, the rows are cut into fixed blocks (normBlocks, a function
// of N and C only, never of the worker count); each block sums its rows in
// order into its own float64 partial (C), and the partials are then added in
// block order. The result is bit-for-bit the same for any number of workers
// and any scheduling.

// normBlockElems is the target number of elements per row block of a norm
// backward; maxNormBlocks caps the number of float64 partials kept.
const (
	normBlockElems = 8 << 10
	maxNormBlocks  = 64
)

// normBlocks returns the fixed row blocking of an (n, c) norm backward: nb
// blocks of rb rows (the last one possibly shorter).
func normBlocks(n, c int) (nb, rb int) {
	rb = max(1, (normBlockElems+c-1)/max(c, 1), (n+maxNormBlocks-1)/maxNormBlocks)
	return (n + rb - 1) / rb, rb
}

// optFloats returns v's first n elements, or nil when v has no buffer.
func optFloats[T Float](v backend.View, n int) []T {
	if v.Buf == nil {
		return nil
	}
	return floats[T](v)[:n]
}

// sumPartials writes dst_j = Σ_k part[k·c + j] over the nb partials, added in
// block order (deterministic), in parallel over columns.
func sumPartials[T Float](b *Backend, dst []T, part []float64, nb, c int) {
	b.parallelFor(c, nb, func(lo, hi int) {
		acc := make([]float64, hi-lo)
		for k := 0; k < nb; k++ {
			p := part[k*c+lo : k*c+hi]
			for j, v := range p {
				acc[j] += v
			}
		}
		for j, v := range acc {
			dst[lo+j] = T(v)
		}
	})
}

// ---------------------------------------------------------------------------
// LayerNorm

// LayerNorm normalises rows of x (N, C): y = (x−mean)·rstd·w + b, saving mean
// and rstd (N). w and b may have a nil Buf (no affine transform).
func (b *Backend) LayerNorm(y, mean, rstd, x, w, bias backend.View, eps float64) {
	checkFloat("layer_norm", x.DType(), y, mean, rstd, w, bias)
	if x.DType() == backend.Float32 {
		layerNormRows[float32](b, y, mean, rstd, x, w, bias, eps)
	} else {
		layerNormRows[float64](b, y, mean, rstd, x, w, bias, eps)
	}
}

func layerNormRows[T Float](b *Backend, y, mean, rstd, x, w, bias backend.View, eps float64) {
	n, c := rowDims(x)
	xs, ys := floats[T](x)[:n*c], floats[T](y)[:n*c]       // (N, C)
	ws, bs := optFloats[T](w, c), optFloats[T](bias, c)    // (C) or nil
	ms, rs := optFloats[T](mean, n), optFloats[T](rstd, n) // (N) or nil
	b.parallelRows(n, 2*c, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			mu, rinv := layerNormForward(ys[r*c:(r+1)*c], xs[r*c:(r+1)*c], ws, bs, eps)
			if ms != nil {
				ms[r] = T(mu)
			}
			if rs != nil {
				rs[r] = T(rinv)
			}
		}
	})
}

// layerNormForward normalises one row, x and y (C), w and bias (C) or nil:
//
//	μ = Σ_j x_j / C,  σ² = Σ_j (x_j − μ)² / C  (biased, as PyTorch),
//	rstd = 1/√(σ² + eps),  y_j = (x_j − μ)·rstd·w_j + b_j
//
// The statistics come from one pass of shifted sums, d_j = x_j − x_0:
// μ = x_0 + Σd/C and σ² = (Σd² − (Σd)²/C)/C, which does not lose precision
// to a large mean the way Σx² − (Σx)²/C does.
func layerNormForward[T Float](y, x, w, bias []T, eps float64) (mean, rstd float64) {
	c := len(x)
	shift := float64(x[0])
	s1, s2 := shiftedSums(x, shift)
	fc := float64(c)
	mean = shift + s1/fc
	variance := max((s2-s1*s1/fc)/fc, 0)
	rstd = 1 / math.Sqrt(variance+eps)
	y = y[:c]
	switch {
	case w != nil && bias != nil:
		w, bias = w[:c], bias[:c]
		for j, v := range x {
			y[j] = T((float64(v)-mean)*rstd*float64(w[j]) + float64(bias[j]))
		}
	case w != nil:
		w = w[:c]
		for j, v := range x {
			y[j] = T((float64(v) - mean) * rstd * float64(w[j]))
		}
	case bias != nil:
		bias = bias[:c]
		for j, v := range x {
			y[j] = T((float64(v)-mean)*rstd + float64(bias[j]))
		}
	default:
		for j, v := range x {
			y[j] = T((float64(v) - mean) * rstd)
		}
	}
	return mean, rstd
}

// LayerNormBackward writes dx (N, C), and dw, db (C) where their Buf is not
// nil (overwriting them), from dy, x, w (nil Buf: no affine) and the saved
// mean and rstd.
func (b *Backend) LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd backend.View) {
	checkFloat("layer_norm_backward", x.DType(), dx, dw, db, dy, w, mean, rstd)
	if x.DType() == backend.Float32 {
		layerNormBackwardRows[float32](b, dx, dw, db, dy, x, w, mean, rstd)
	} else {
		layerNormBackwardRows[float64](b, dx, dw, db, dy, x, w, mean, rstd)
	}
}

func layerNormBackwardRows[T Float](b *Backend, dx, dw, db, dy, x, w, mean, rstd backend.View) {
	n, c := rowDims(x)
	if n == 0 {
		clearOpt[T](dw, c)
		clearOpt[T](db, c)
		return
	}
	xs, dys, dxs := floats[T](x)[:n*c], floats[T](dy)[:n*c], optFloats[T](dx, n*c) // (N, C)
	ws := optFloats[T](w, c)                                                       // (C) or nil
	ms, rs := floats[T](mean)[:n], floats[T](rstd)[:n]                             // (N)
	dws, dbs := optFloats[T](dw, c), optFloats[T](db, c)                           // (C) or nil
	nb, rb := normBlocks(n, c)
	var pw, pb []float64 // (nb, C) float64 partials of dw and db
	if dws != nil {
		pw = make([]float64, nb*c)
	}
	if dbs != nil {
		pb = make([]float64, nb*c)
	}
	b.parallelRows(nb, rb*3*c, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			var kw, kb []float64
			if pw != nil {
				kw = pw[k*c : (k+1)*c]
			}
			if pb != nil {
				kb = pb[k*c : (k+1)*c]
			}
			for r := k * rb; r < min((k+1)*rb, n); r++ {
				var dxr []T
				if dxs != nil {
					dxr = dxs[r*c : (r+1)*c]
				}
				layerNormBackward(dxr, kw, kb, dys[r*c:(r+1)*c], xs[r*c:(r+1)*c], ws,
					float64(ms[r]), float64(rs[r]))
			}
		}
	})
	if dws != nil {
		sumPartials(b, dws, pw, nb, c)
	}
	if dbs != nil {
		sumPartials(b, dbs, pb, nb, c)
	}
}

// layerNormBackward differentiates one row, dx, dy, x (C), w (C) or nil, and
// adds the row's weight and bias gradients into the float64 partials pw and
// pb (C) where they are not nil. With x̂_j = (x_j − μ)·rstd and g_j = dy_j·w_j:
//
//	dx_j = rstd·(g_j − mean_k(g_k) − x̂_j·mean_k(g_k·x̂_k))
//	dw_j += dy_j·x̂_j,  db_j += dy_j
func layerNormBackward[T Float](dx []T, pw, pb []float64, dy, x, w []T, mean, rstd float64) {
	c := len(x)
	dy = dy[:c]
	if pw != nil {
		pw = pw[:c]
		for j, v := range x {
			pw[j] += float64(dy[j]) * (float64(v) - mean) * rstd
		}
	}
	if pb != nil {
		pb = pb[:c]
		for j, g := range dy {
			pb[j] += float64(g)
		}
	}
	if dx == nil {
		return
	}
	sg, sgx := gradSums(dy, w, x, mean) // Σ g, Σ g·(x − μ)
	fc := float64(c)
	sg /= fc
	sgx *= rstd / fc
	dx = dx[:c]
	if w == nil {
		for j, v := range x {
			xh := (float64(v) - mean) * rstd
			dx[j] = T(rstd * (float64(dy[j]) - sg - xh*sgx))
		}
		return
	}
	w = w[:c]
	for j, v := range x {
		xh := (float64(v) - mean) * rstd
		dx[j] = T(rstd * (float64(dy[j])*float64(w[j]) - sg - xh*sgx))
	}
}

// shiftedSums returns Σ_j (x_j − k) and Σ_j (x_j − k)², each in two
// partial sums (see dotRow).
func shiftedSums[T Float](x []T, k float64) (s1, s2 float64) {
	var a0, a1, b0, b1 float64
	j := 0
	for ; j+2 <= len(x); j += 2 {
		x2 := x[j : j+2 : j+2]
		d0, d1 := float64(x2[0])-k, float64(x2[1])-k
		a0 += d0
		a1 += d1
		b0 += d0 * d0
		b1 += d1 * d1
	}
	if j < len(x) {
		d := float64(x[j]) - k
		a0 += d
		b0 += d * d
	}
	return a0 + a1, b0 + b1
}

// gradSums returns Σ_j g_j and Σ_j g_j·(x_j − k) with g_j = dy_j·w_j, or
// g_j = dy_j when w is nil, each in two partial sums (see dotRow).
func gradSums[T Float](dy, w, x []T, k float64) (sg, sgx float64) {
	dy = dy[:len(x)]
	var a0, a1, b0, b1 float64
	j := 0
	if w == nil {
		for ; j+2 <= len(x); j += 2 {
			x2, g2 := x[j:j+2:j+2], dy[j:j+2:j+2]
			g0, g1 := float64(g2[0]), float64(g2[1])
			a0 += g0
			a1 += g1
			b0 += g0 * (float64(x2[0]) - k)
			b1 += g1 * (float64(x2[1]) - k)
		}
	} else {
		w = w[:len(x)]
		for ; j+2 <= len(x); j += 2 {
			x2, g2, w2 := x[j:j+2:j+2], dy[j:j+2:j+2], w[j:j+2:j+2]
			g0, g1 := float64(g2[0])*float64(w2[0]), float64(g2[1])*float64(w2[1])
			a0 += g0
			a1 += g1
			b0 += g0 * (float64(x2[0]) - k)
			b1 += g1 * (float64(x2[1]) - k)
		}
	}
	if j < len(x) {
		g := float64(dy[j])
		if w != nil {
			g *= float64(w[j])
		}
		a0 += g
		b0 += g * (float64(x[j]) - k)
	}
	return a0 + a1, b0 + b1
}

// clearOpt zeroes v's first n elements when v has a buffer.
func clearOpt[T Float](v backend.View, n int) {
	if s := optFloats[T](v, n); s != nil {
		clear(s)
	}
}

// ---------------------------------------------------------------------------
// RMSNorm

// RMSNorm writes y = x·rstd·w with rstd = 1/√(mean(x²)+eps) per row of x
// (N, C), saving rstd (N). w may have a nil Buf (no weight).
func (b *Backend) RMSNorm(y, rstd, x, w backend.View, eps float64) {
	checkFloat("rms_norm", x.DType(), y, rstd, w)
	if x.DType() == backend.Float32 {
		rmsNormRows[float32](b, y, rstd, x, w, eps)
	} else {
		rmsNormRows[float64](b, y, rstd, x, w, eps)
	}
}

func rmsNormRows[T Float](b *Backend, y, rstd, x, w backend.View, eps float64) {
	n, c := rowDims(x)
	xs, ys := floats[T](x)[:n*c], floats[T](y)[:n*c] // (N, C)
	ws := optFloats[T](w, c)                         // (C) or nil
	rs := optFloats[T](rstd, n)                      // (N) or nil
	b.parallelRows(n, 2*c, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			rinv := rmsNormForward(ys[r*c:(r+1)*c], xs[r*c:(r+1)*c], ws, eps)
			if rs != nil {
				rs[r] = T(rinv)
			}
		}
	})
}

// rmsNormForward normalises one row, x and y (C), w (C) or nil:
//
//	rstd = 1/√(Σ_j x_j² / C + eps),  y_j = x_j·rstd·w_j
func rmsNormForward[T Float](y, x, w []T, eps float64) (rstd float64) {
	c := len(x)
	rstd = 1 / math.Sqrt(dotRow(x, x)/float64(c)+eps)
	y = y[:c]
	if isF32[T]() {
		if w == nil {
			scale32(asF32(y), asF32(x), rstd)
		} else {
			scaleMul32(asF32(y), asF32(x), asF32(w), rstd)
		}
		return rstd
	}
	if w == nil {
		for j, v := range x {
			y[j] = T(float64(v) * rstd)
		}
		return rstd
	}
	w = w[:c]
	for j, v := range x {
		y[j] = T(float64(v) * rstd * float64(w[j]))
	}
	return rstd
}

// RMSNormBackward writes dx (N, C), and dw (C) where its Buf is not nil, from
// dy, x, w (nil Buf: no weight) and the saved rstd.
func (b *Backend) RMSNormBackward(dx, dw, dy, x, w, rstd backend.View) {
	checkFloat("rms_norm_backward", x.DType(), dx, dw, dy, w, rstd)
	if x.DType() == backend.Float32 {
		rmsNormBackwardRows[float32](b, dx, dw, dy, x, w, rstd)
	} else {
		rmsNormBackwardRows[float64](b, dx, dw, dy, x, w, rstd)
	}
}

func rmsNormBackwardRows[T Float](b *Backend, dx, dw, dy, x, w, rstd backend.View) {
	n, c := rowDims(x)
	if n == 0 {
		clearOpt[T](dw, c)
		return
	}
	xs, dys, dxs := floats[T](x)[:n*c], floats[T](dy)[:n*c], optFloats[T](dx, n*c) // (N, C)
	ws, dws := optFloats[T](w, c), optFloats[T](dw, c)                             // (C) or nil
	rs := floats[T](rstd)[:n]                                                      // (N)
	nb, rb := normBlocks(n, c)
	var pw []float64 // (nb, C) float64 partials of dw
	if dws != nil {
		pw = make([]float64, nb*c)
	}
	b.parallelRows(nb, rb*3*c, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			var kw []float64
			if pw != nil {
				kw = pw[k*c : (k+1)*c]
			}
			for r := k * rb; r < min((k+1)*rb, n); r++ {
				var dxr []T
				if dxs != nil {
					dxr = dxs[r*c : (r+1)*c]
				}
				rmsNormBackward(dxr, kw, dys[r*c:(r+1)*c], xs[r*c:(r+1)*c], ws, float64(rs[r]))
			}
		}
	})
	if dws != nil {
		sumPartials(b, dws, pw, nb, c)
	}
}

// rmsNormBackward differentiates one row, dx, dy, x (C), w (C) or nil, and
// adds the row's weight gradient into the float64 partial pw (C) unless nil.
// With g_j = dy_j·w_j:
//
//	dx_j = rstd·(g_j − x_j·rstd²·Σ_k g_k·x_k / C)
//	dw_j += dy_j·x_j·rstd
func rmsNormBackward[T Float](dx []T, pw []float64, dy, x, w []T, rstd float64) {
	c := len(x)
	if isF32[T]() && dx != nil && pw != nil && w != nil &&
		rmsBackRow32(asF32(dx), pw, asF32(dy), asF32(x), asF32(w), rstd) {
		return
	}
	dy = dy[:c]
	if pw != nil {
		pw = pw[:c]
		for j, v := range x {
			pw[j] += float64(dy[j]) * float64(v) * rstd
		}
	}
	if dx == nil {
		return
	}
	_, sgx := gradSums(dy, w, x, 0) // Σ g·x
	k := rstd * rstd * sgx / float64(c)
	dx = dx[:c]
	if w == nil {
		for j, v := range x {
			dx[j] = T(rstd * (float64(dy[j]) - float64(v)*k))
		}
		return
	}
	w = w[:c]
	for j, v := range x {
		dx[j] = T(rstd * (float64(dy[j])*float64(w[j]) - float64(v)*k))
	}
}
