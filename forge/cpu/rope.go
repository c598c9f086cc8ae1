package cpu

import (
	"fmt"
	"math"
	"sync"

	"github.com/forgeml/forge/forge/backend"
)

// Rotary position embedding, interleaved pairs (GPT-J convention): pair k of
// a head vector is (x[2k], x[2k+1]) and is rotated by the angle
//
//	φ(t, k) = (pos0 + t)·θ^(−2k/D),   k = 0 … D/2−1
//
//	y[2k]   = x[2k]·cos φ − x[2k+1]·sin φ
//	y[2k+1] = x[2k]·sin φ + x[2k+1]·cos φ
//
// The rotation is orthogonal, so the backward pass is the inverse rotation
// (angle −φ). Angles, cosines, sines and the rotation itself are computed in
// float64.

// ropeKey identifies a cos/sin table.
type ropeKey struct {
	t, d, pos0 int
	theta      float64
}

// ropeTable holds cos φ(t, k) and sin φ(t, k), each (T, D/2).
type ropeTable struct {
	key      ropeKey
	cos, sin []float64

	// The same laid out for the vector kernel (ropeRow32), each (T, D),
	// where it runs: cc[2k] = cc[2k+1] = cos φ, and ss = (−sin φ, sin φ)
	// per pair for the rotation, (sin φ, −sin φ) for the inverse.
	cc, ss, ssInv []float64
}

// ropeCache keeps the most recently used tables (a training step uses one
// table for every layer, forward and backward); the front is the newest.
// Tables are immutable once built, so readers share them without locking.
var ropeCache struct {
	sync.Mutex
	tables []*ropeTable
}

const ropeCacheSize = 8

// ropeTableFor returns the table for key, building it (in parallel over
// positions) on a miss.
func (b *Backend) ropeTableFor(key ropeKey) *ropeTable {
	ropeCache.Lock()
	for i, tb := range ropeCache.tables {
		if tb.key == key {
			copy(ropeCache.tables[1:i+1], ropeCache.tables[:i])
			ropeCache.tables[0] = tb
			ropeCache.Unlock()
			return tb
		}
	}
	ropeCache.Unlock()

	half := key.d / 2
	tb := &ropeTable{key: key, cos: make([]float64, key.t*half), sin: make([]float64, key.t*half)}
	freq := make([]float64, half) // θ^(−2k/D)
	for k := range freq {
		freq[k] = math.Pow(key.theta, -float64(2*k)/float64(key.d))
	}
	wide := ropeVector && key.d%8 == 0
	if wide {
		n := key.t * key.d
		tb.cc, tb.ss, tb.ssInv = make([]float64, n), make([]float64, n), make([]float64, n)
	}
	b.parallelFor(key.t, expCost*half, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			pos := float64(key.pos0 + t)
			for k, f := range freq {
				sn, cs := math.Sincos(pos * f)
				tb.sin[t*half+k], tb.cos[t*half+k] = sn, cs
				if wide {
					j := t*key.d + 2*k
					tb.cc[j], tb.cc[j+1] = cs, cs
					tb.ss[j], tb.ss[j+1] = -sn, sn
					tb.ssInv[j], tb.ssInv[j+1] = sn, -sn
				}
			}
		}
	})

	ropeCache.Lock()
	defer ropeCache.Unlock()
	for _, old := range ropeCache.tables {
		if old.key == key { // built concurrently by another caller
			return old
		}
	}
	if len(ropeCache.tables) < ropeCacheSize {
		ropeCache.tables = append(ropeCache.tables, nil)
	}
	copy(ropeCache.tables[1:], ropeCache.tables)
	ropeCache.tables[0] = tb
	return tb
}

// RoPE rotates the interleaved pairs of x (N, T, D), contiguous, into y by
// the angles above, or by their negatives when inverse. y may be x.
func (b *Backend) RoPE(y, x backend.View, pos0 int, theta float64, inverse bool) {
	checkFloat("rope", x.DType(), y)
	if x.DType() == backend.Float32 {
		ropeRows[float32](b, y, x, pos0, theta, inverse)
	} else {
		ropeRows[float64](b, y, x, pos0, theta, inverse)
	}
}

// RoPEStrided is RoPE for an x whose rows (last axis) are contiguous and
// whose other axes have any strides (backend.KernelRoPEStrided); y is contiguous.
var _ = declare(backend.KernelRoPEStrided, computed)

func (b *Backend) RoPEStrided(y, x backend.View, pos0 int, theta float64, inverse bool) {
	checkFloat("rope", x.DType(), y)
	r := len(x.Shape)
	if r < 2 || (x.Strides[r-1] != 1 && x.Shape[r-1] > 1) {
		panic(fmt.Sprintf("cpu: rope: x %v with strides %v needs rank ≥ 2 and contiguous rows", x.Shape, x.Strides))
	}
	if x.DType() == backend.Float32 {
		ropeRows[float32](b, y, x, pos0, theta, inverse)
	} else {
		ropeRows[float64](b, y, x, pos0, theta, inverse)
	}
}

func ropeRows[T Float](b *Backend, y, x backend.View, pos0 int, theta float64, inverse bool) {
	r := len(x.Shape)
	d, t := 1, 1
	if r >= 1 {
		d = x.Shape[r-1]
	}
	if r >= 2 {
		t = x.Shape[r-2]
	}
	if d%2 != 0 {
		panic(fmt.Sprintf("cpu: rope: head dimension %d is odd (shape %v)", d, x.Shape))
	}
	if t == 0 || d == 0 {
		return
	}
	rows := x.Numel() / d // N·T rows of D
	ys := floats[T](y)[:rows*d]
	strided := !x.IsContiguous()
	var xs []T
	if strided {
		xs = wholeFloats[T](x) // offsets from ropeRowOffset
	} else {
		xs = floats[T](x)[:rows*d] // (N, T, D)
	}
	tb := b.ropeTableFor(ropeKey{t: t, d: d, pos0: pos0, theta: theta})
	sign := 1.0
	if inverse {
		sign = -1
	}
	half := d / 2
	b.parallelFor(rows, 3*d, func(lo, hi int) {
		// Strided: an odometer over the row axes gives each row's offset.
		var it redCursor
		if strided {
			r := len(x.Shape) - 1
			it = redCursor{shape: x.Shape[:r], strides: x.Strides[:r], idx: make([]int, r), off0: x.Offset}
			it.seek(lo)
		}
		for row := lo; row < hi; row++ {
			p := row % t
			xo := row * d
			if strided {
				xo = it.off
				it.next()
			}
			if tb.cc != nil && isF32[T]() {
				ss := tb.ss
				if inverse {
					ss = tb.ssInv
				}
				ropeRow32(asF32(ys[row*d:(row+1)*d]), asF32(xs[xo:xo+d]), tb.cc[p*d:(p+1)*d], ss[p*d:(p+1)*d])
				continue
			}
			ropeForward(ys[row*d:(row+1)*d], xs[xo:xo+d],
				tb.cos[p*half:(p+1)*half], tb.sin[p*half:(p+1)*half], sign)
		}
	})
}

// ropeForward rotates one row, x and y (D), with cos and sin (D/2) of its
// position; sign −1 gives the inverse rotation (ropeForward with sign −1 is
// also the backward: R(φ)ᵀ = R(−φ)):
//
//	y[2k]   = x[2k]·cos_k − sign·x[2k+1]·sin_k
//	y[2k+1] = sign·x[2k]·sin_k + x[2k+1]·cos_k
func ropeForward[T Float](y, x []T, cos, sin []float64, sign float64) {
	x, y = x[:2*len(cos)], y[:2*len(cos)]
	sin = sin[:len(cos)]
	for k, c := range cos {
		s := sign * sin[k]
		a, b := float64(x[2*k]), float64(x[2*k+1])
		y[2*k] = T(a*c - b*s)
		y[2*k+1] = T(a*s + b*c)
	}
}
