package cpu

import (
	"math"

	"github.com/forgeml/forge/forge/backend"
)

// Row kernels shared by softmax, the norms and cross-entropy.
//
// Statistics (max, Σ exp, Σ x, Σ x², Σ g·x, …) are accumulated in float64
// whatever the data type: a float32 row is widened element by element and
// only the final value is rounded back, so float32 results are as accurate as
// one rounding allows and agree with PyTorch's float32 kernels to ~1e-7.

// rowExpBlock is the length of the stack buffers that row kernels stage
// float64 exponentials in.
const rowExpBlock = 256

// expCost weights an element whose update needs an exponential when telling
// parallelRows how much work a row is. The float32 exp kernels of exp.go
// take well under a nanosecond an element, but the row loops around them
// (max, scaling) and the float64 path's math.Exp keep a row element worth
// several memory touches.
const expCost = 8

// rowDims views a contiguous tensor as rows of its last axis: n rows of c
// elements. A scalar is one row of one element.
func rowDims(v backend.View) (n, c int) {
	c = 1
	if len(v.Shape) > 0 {
		c = v.Shape[len(v.Shape)-1]
	}
	if c == 0 {
		return 0, 0
	}
	return v.Numel() / c, c
}

// Row reductions. Each keeps four partial sums in float64: a single running
// sum is bound by the latency of its add (about 4 cycles an element), four
// independent ones let the loop run at the pace of its loads. The order of
// the additions depends only on the row length, so results are
// deterministic.

// dotRow returns Σ_j a_j·b_j.
func dotRow[T Float](a, b []T) float64 {
	if isF32[T]() {
		return dot32(asF32(a), asF32(b))
	}
	return dotGo(a, b)
}

// sumRow returns Σ_j a_j.
func sumRow[T Float](a []T) float64 {
	var s0, s1, s2, s3 float64
	j := 0
	for ; j+4 <= len(a); j += 4 {
		a4 := a[j : j+4 : j+4]
		s0 += float64(a4[0])
		s1 += float64(a4[1])
		s2 += float64(a4[2])
		s3 += float64(a4[3])
	}
	for ; j < len(a); j++ {
		s0 += float64(a[j])
	}
	return (s0 + s1) + (s2 + s3)
}

// checkFloat panics unless every view with a buffer has dtype dt: a float32
// view handed to a float64 kernel would otherwise fail with a bare slice
// error. kernel names the op in the message.
func checkFloat(kernel string, dt backend.DType, views ...backend.View) {
	if dt != backend.Float32 && dt != backend.Float64 {
		panic(badDType(kernel, dt))
	}
	for _, v := range views {
		if v.Buf != nil && v.DType() != dt {
			panic(mismatch(kernel, dt, v.DType()))
		}
	}
}

// rowMax returns max_j x_j in float64 (−Inf for an empty row). NaNs are
// skipped here; they reach the result through the exponentials.
func rowMax[T Float](x []T) float64 {
	if isF32[T]() {
		return float64(rowMax32(asF32(x)))
	}
	m := T(math.Inf(-1))
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	return float64(m)
}

// rowArgMax returns max_j x_j in float64 and the first j where it is
// reached (−Inf and −1 for an empty row or one of NaNs only). A float32
// row takes the max first and then looks for its first occurrence (both
// passes vectorised or cheap), which finds the same j and value.
func rowArgMax[T Float](x []T) (float64, int) {
	if isF32[T]() {
		m := rowMax(x)
		for j, v := range x {
			if float64(v) == m {
				return float64(v), j
			}
		}
		return m, -1
	}
	m, jm := T(math.Inf(-1)), -1
	for j, v := range x {
		if v > m || jm < 0 && v == m {
			m, jm = v, j
		}
	}
	return float64(m), jm
}

// sumExpShift returns Σ_j exp(x_j − m) in float64 (float32 through the
// exp kernel of exp.go, float64 through math.Exp).
func sumExpShift[T Float](x []T, m float64) float64 {
	if isF32[T]() {
		return expShiftSum32(nil, asF32(x), m, 1)
	}
	s := 0.0
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	return s
}

// expShiftScale writes y_j = a·exp(x_j − m) and returns Σ_j exp(x_j − m) in
// float64 (the unrounded values). y and x may be the same slice.
func expShiftScale[T Float](y, x []T, m, a float64) float64 {
	y = y[:len(x)]
	if isF32[T]() {
		return expShiftSum32(asF32(y), asF32(x), m, a)
	}
	s := 0.0
	for j, v := range x {
		e := math.Exp(float64(v) - m)
		s += e
		y[j] = T(a * e)
	}
	return s
}

// ---------------------------------------------------------------------------
// Softmax

// Softmax writes y = softmax(x) or log_softmax(x) over the last axis.
// A row holding NaN or +Inf, or only −Inf, comes out NaN as in PyTorch.
func (b *Backend) Softmax(y, x backend.View, log bool) {
	checkFloat("softmax", x.DType(), y)
	if x.DType() == backend.Float32 {
		softmaxRows[float32](b, y, x, log)
	} else {
		softmaxRows[float64](b, y, x, log)
	}
}

func softmaxRows[T Float](b *Backend, y, x backend.View, log bool) {
	n, c := rowDims(x)
	xs, ys := floats[T](x)[:n*c], floats[T](y)[:n*c] // (N, C)
	b.parallelRows(n, expCost*c, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := xs[r*c:(r+1)*c], ys[r*c:(r+1)*c]
			if log {
				logSoftmaxForward(yr, xr)
			} else {
				softmaxForward(yr, xr)
			}
		}
	})
}

// softmaxForward computes one row, x and y (C):
//
//	m = max_j x_j,  s = Σ_j exp(x_j − m),  y_j = exp(x_j − m) / s
//
// Subtracting the row max keeps every exponent ≤ 0, so nothing overflows.
func softmaxForward[T Float](y, x []T) {
	m := rowMax(x)
	s := expShiftScale(y, x, m, 1)
	scaleRow(y, y, 1/s)
}

// scaleRow writes y_j = x_j·a, the product in float64 and rounded once.
// y may be x.
func scaleRow[T Float](y, x []T, a float64) {
	if isF32[T]() {
		scale32(asF32(y), asF32(x), a)
		return
	}
	y = y[:len(x)]
	for j, v := range x {
		y[j] = T(float64(v) * a)
	}
}

// logSoftmaxForward computes one row, x and y (C):
//
//	m = max_j x_j,  y_j = (x_j − m) − log Σ_k exp(x_k − m)
//
// x_j − m is exact for the largest entries, so an output near 0 keeps its
// relative precision even when |m| is large (m + log s would round it away).
// For the same reason the log is taken as log1p of the sum without the
// first maximal entry (whose term is exactly 1): log s for s = 1 + ε would
// leave −ε, a confident row's top output, with only ~1e-16 absolute
// precision, and make it depend on the order of the additions.
func logSoftmaxForward[T Float](y, x []T) {
	m, jm := rowArgMax(x)
	rest := math.NaN() // a +Inf entry, or only −Inf or NaN: NaN as in PyTorch
	if !math.IsInf(m, 0) {
		rest = sumExpShift(x[:jm], m) + sumExpShift(x[jm+1:], m)
	}
	ls := math.Log1p(rest)
	for j, v := range x {
		y[j] = T((float64(v) - m) - ls)
	}
}

// SoftmaxBackward writes dx from the forward output y and the gradient dy.
func (b *Backend) SoftmaxBackward(dx, y, dy backend.View, log bool) {
	checkFloat("softmax_backward", y.DType(), dx, dy)
	if y.DType() == backend.Float32 {
		softmaxBackwardRows[float32](b, dx, y, dy, log)
	} else {
		softmaxBackwardRows[float64](b, dx, y, dy, log)
	}
}

func softmaxBackwardRows[T Float](b *Backend, dx, y, dy backend.View, log bool) {
	n, c := rowDims(y)
	ys, dys, dxs := floats[T](y)[:n*c], floats[T](dy)[:n*c], floats[T](dx)[:n*c] // (N, C)
	cost := 3 * c
	if log {
		cost = expCost * c
	}
	b.parallelRows(n, cost, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			yr, gr, dr := ys[r*c:(r+1)*c], dys[r*c:(r+1)*c], dxs[r*c:(r+1)*c]
			if log {
				logSoftmaxBackward(dr, yr, gr)
			} else {
				softmaxBackward(dr, yr, gr)
			}
		}
	})
}

// softmaxBackward computes one row, dx, y, dy (C):
//
//	dx_j = y_j·(dy_j − Σ_k dy_k·y_k)
func softmaxBackward[T Float](dx, y, dy []T) {
	dy = dy[:len(y)]
	dot := dotRow(dy, y)
	dx = dx[:len(y)]
	for j, v := range y {
		dx[j] = T(float64(v) * (float64(dy[j]) - dot))
	}
}

// logSoftmaxBackward computes one row, dx, y, dy (C), y = log_softmax(x):
//
//	dx_j = dy_j − exp(y_j)·Σ_k dy_k
func logSoftmaxBackward[T Float](dx, y, dy []T) {
	dy = dy[:len(y)]
	s := sumRow(dy)
	dx = dx[:len(y)]
	if isF32[T]() {
		var e [rowExpBlock]float64
		for lo := 0; lo < len(y); lo += rowExpBlock {
			yb := y[lo:min(lo+rowExpBlock, len(y))]
			eb := e[:len(yb)]
			expShift64(eb, asF32(yb), 0)
			for j, v := range eb {
				dx[lo+j] = T(float64(dy[lo+j]) - v*s)
			}
		}
		return
	}
	for j, v := range y {
		dx[j] = T(float64(dy[j]) - math.Exp(float64(v))*s)
	}
}
