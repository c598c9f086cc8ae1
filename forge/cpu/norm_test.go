package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// rkNorm is one configuration of LayerNorm or RMSNorm.
type rkNorm struct {
	layer      bool // LayerNorm, else RMSNorm
	hasW, hasB bool
	eps        float64
}

func (k rkNorm) String() string {
	name := "rms_norm"
	if k.layer {
		name = "layer_norm"
	}
	return fmt.Sprintf("%s(w=%v,b=%v)", name, k.hasW, k.hasB)
}

var rkNorms = []rkNorm{
	{layer: true, hasW: true, hasB: true, eps: 1e-5},
	{layer: true, hasW: true, eps: 1e-5},
	{layer: true, eps: 1e-5},
	{hasW: true, eps: 1e-6},
	{eps: 1e-6},
}

// rkOptView is rkView, or a view with a nil Buf when !present.
func rkOptView(present bool, dt backend.DType, shape []int, data []float64) backend.View {
	if !present {
		return backend.View{}
	}
	return rkView(dt, shape, data)
}

// forward runs the kernel in dtype dt and returns y (N, C) and the saved
// statistics mean (LayerNorm only) and rstd (N).
func (k rkNorm) forward(b *Backend, dt backend.DType, n, c int, x, w, bias []float64) (y, mean, rstd []float64) {
	yv, xv := rkView(dt, []int{n, c}, nil), rkView(dt, []int{n, c}, x)
	wv := rkOptView(k.hasW, dt, []int{c}, w)
	rv := rkView(dt, []int{n}, nil)
	if k.layer {
		mv := rkView(dt, []int{n}, nil)
		b.LayerNorm(yv, mv, rv, xv, wv, rkOptView(k.hasB, dt, []int{c}, bias), k.eps)
		mean = rkRead(mv)
	} else {
		b.RMSNorm(yv, rv, xv, wv, k.eps)
	}
	return rkRead(yv), mean, rkRead(rv)
}

// loss returns Σ dy·y and Σ|dy·y| for the float64 forward.
func (k rkNorm) loss(b *Backend, n, c int, x, w, bias, dy []float64) (float64, float64) {
	y, _, _ := k.forward(b, backend.Float64, n, c, x, w, bias)
	return rkDotAbs(y, dy)
}

// backward runs the backward kernel in dtype dt and returns dx, dw, db (nil
// where the configuration has no such parameter).
func (k rkNorm) backward(b *Backend, dt backend.DType, n, c int, dy, x, w, mean, rstd []float64) (dx, dw, db []float64) {
	dxv := rkView(dt, []int{n, c}, nil)
	dwv := rkOptView(k.hasW, dt, []int{c}, nil)
	dbv := rkOptView(k.hasB, dt, []int{c}, nil)
	dyv, xv := rkView(dt, []int{n, c}, dy), rkView(dt, []int{n, c}, x)
	wv := rkOptView(k.hasW, dt, []int{c}, w)
	rv := rkView(dt, []int{n}, rstd)
	if k.layer {
		b.LayerNormBackward(dxv, dwv, dbv, dyv, xv, wv, rkView(dt, []int{n}, mean), rv)
	} else {
		b.RMSNormBackward(dxv, dwv, dyv, xv, wv, rv)
	}
	dx = rkRead(dxv)
	if k.hasW {
		dw = rkRead(dwv)
	}
	if k.hasB {
		db = rkRead(dbv)
	}
	return dx, dw, db
}

// ref is the textbook float64 forward: two-pass mean and variance.
func (k rkNorm) ref(n, c int, x, w, bias []float64) (y, mean, rstd []float64) {
	y, mean, rstd = make([]float64, n*c), make([]float64, n), make([]float64, n)
	for r := 0; r < n; r++ {
		row := x[r*c : (r+1)*c]
		mu := 0.0
		if k.layer {
			for _, v := range row {
				mu += v
			}
			mu /= float64(c)
		}
		ss := 0.0
		for _, v := range row {
			ss += (v - mu) * (v - mu)
		}
		rs := 1 / math.Sqrt(ss/float64(c)+k.eps)
		mean[r], rstd[r] = mu, rs
		for j, v := range row {
			o := (v - mu) * rs
			if k.hasW {
				o *= w[j]
			}
			if k.hasB {
				o += bias[j]
			}
			y[r*c+j] = o
		}
	}
	if !k.layer {
		mean = nil
	}
	return y, mean, rstd
}

// rkNormData returns (n, c) inputs: unit normals with rows of large mean
// (1000 + N(0,1)), tiny scale (variance below eps), constants (variance 0)
// and large scale.
func rkNormData(rng *rand.Rand, n, c int) []float64 {
	x := rkNormal(rng, n*c, 1, 0.3)
	for r := 0; r < n; r++ {
		row := x[r*c : (r+1)*c]
		switch r % 6 {
		case 1:
			copy(row, rkNormal(rng, c, 1, 1000))
		case 2:
			copy(row, rkNormal(rng, c, 1e-3, 0))
		case 3:
			for j := range row {
				row[j] = 2.5
			}
		case 4:
			copy(row, rkNormal(rng, c, 100, -7))
		}
	}
	return x
}

func TestNormForward(t *testing.T) {
	b := rkBackend(0)
	rng := rand.New(rand.NewPCG(7, 8))
	worst := rkWorst{}
	for _, k := range rkNorms {
		for _, c := range rkCs {
			for _, n := range rkNs(c) {
				x := rkNormData(rng, n, c)
				w, bias := rkNormal(rng, c, 1, 1), rkNormal(rng, c, 1, 0)
				wy, wm, wr := k.ref(n, c, x, w, bias)
				for _, dt := range rkDTypes {
					y, mean, rstd := k.forward(b, dt, n, c, x, w, bias)
					tol := 1e-12
					if dt == backend.Float32 {
						tol = 1e-6
					}
					for _, o := range []struct {
						what      string
						got, want []float64
					}{{"y", y, wy}, {"mean", mean, wm}, {"rstd", rstd, wr}} {
						if o.want == nil {
							continue
						}
						// Entries much smaller than the largest are compared
						// against 1e-3 of it (y = x̂·w + b may cancel to 0).
						e := rkRelErr(o.got, o.want, 1e-3*rkMaxAbs(o.want))
						name := fmt.Sprintf("%v %s %v", k, o.what, dt)
						worst.add(name, e)
						if e > tol {
							t.Errorf("%s N=%d C=%d: relative error %.3g > %.g", name, n, c, e, tol)
						}
					}
				}
			}
		}
	}
	worst.log(t)
}

// TestNormBackward checks dx row by row and dw, db over all rows against
// central differences of the float64 forward of L = Σ dy·y, and the float32
// backward against the float64 backward on the same inputs (including the
// float32 forward's saved statistics).
func TestNormBackward(t *testing.T) {
	b := rkBackend(0)
	rng := rand.New(rand.NewPCG(9, 10))
	worst := rkWorst{}
	for _, k := range rkNorms {
		for _, c := range rkCs {
			for _, n := range rkNs(c) {
				x := rkNormData(rng, n, c)
				w, bias := rkNormal(rng, c, 1, 1), rkNormal(rng, c, 1, 0)
				dy := rkNormal(rng, n*c, 1, 0)

				// float32 against float64, same inputs.
				_, mean32, rstd32 := k.forward(b, backend.Float32, n, c, x, w, bias)
				dx32, dw32, db32 := k.backward(b, backend.Float32, n, c, dy, x, w, mean32, rstd32)
				dx64, dw64, db64 := k.backward(b, backend.Float64, n, c, dy, x, w, mean32, rstd32)
				for _, o := range []struct {
					what      string
					got, want []float64
				}{{"dx", dx32, dx64}, {"dw", dw32, dw64}, {"db", db32, db64}} {
					if o.want == nil {
						continue
					}
					e := rkRelErr(o.got, o.want, 1e-3*rkMaxAbs(o.want))
					name := fmt.Sprintf("%v %s f32 vs f64", k, o.what)
					worst.add(name, e)
					if e > 1e-6 {
						t.Errorf("%s N=%d C=%d: relative error %.3g", name, n, c, e)
					}
				}

				// float64 against finite differences.
				_, mean, rstd := k.forward(b, backend.Float64, n, c, x, w, bias)
				dx, dw, db := k.backward(b, backend.Float64, n, c, dy, x, w, mean, rstd)
				for _, r := range rkSample(n, 40) {
					xr, gr := x[r*c:(r+1)*c], dy[r*c:(r+1)*c]
					// The row varies on the scale of its normaliser
					// 1/rstd = √(σ² + eps): 1e-3 for the tiny rows, 100 for
					// the wide ones.
					h := rkFDStep / rstd[r]
					e := rkFDErr(dx[r*c:(r+1)*c], xr, nil, h, func() (float64, float64) {
						return k.loss(b, 1, c, xr, w, bias, gr)
					})
					name := fmt.Sprintf("%v dx vs finite differences", k)
					worst.add(name, e)
					if e > 1e-6 {
						t.Errorf("%s N=%d C=%d row %d: relative error %.3g", name, n, c, r, e)
					}
				}
				js := rkSample(c, 8) // columns of w and b to perturb
				f := func() (float64, float64) { return k.loss(b, n, c, x, w, bias, dy) }
				for _, o := range []struct {
					what   string
					an, at []float64
				}{{"dw", dw, w}, {"db", db, bias}} {
					if o.an == nil {
						continue
					}
					an := make([]float64, len(js))
					for i, j := range js {
						an[i] = o.an[j]
					}
					e := rkFDErr(an, o.at, js, 0, f)
					name := fmt.Sprintf("%v %s vs finite differences", k, o.what)
					worst.add(name, e)
					if e > 1e-6 {
						t.Errorf("%s N=%d C=%d: relative error %.3g", name, n, c, e)
					}
				}
			}
		}
	}
	worst.log(t)
}

// TestNormBackwardDeterministic checks that dx, dw and db are bitwise the
// same whatever the number of workers.
func TestNormBackwardDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const n, c = 3001, 65
	x := rkNormal(rng, n*c, 1, 0.3)
	w, bias := rkNormal(rng, c, 1, 1), rkNormal(rng, c, 1, 0)
	dy := rkNormal(rng, n*c, 1, 0)
	if nb, _ := normBlocks(n, c); nb < 16 {
		t.Fatalf("only %d row blocks: the test would not exercise the partial sums", nb)
	}
	for _, k := range []rkNorm{rkNorms[0], {hasW: true, eps: 1e-6}} {
		for _, dt := range rkDTypes {
			var first [3][]float64
			for i, workers := range []int{1, 2, 3, 4, 7, 8, 16, 33} {
				b := rkBackend(workers)
				_, mean, rstd := k.forward(b, dt, n, c, x, w, bias)
				dx, dw, db := k.backward(b, dt, n, c, dy, x, w, mean, rstd)
				got := [3][]float64{dx, dw, db}
				if i == 0 {
					first = got
					continue
				}
				for o := range got {
					for j := range got[o] {
						if math.Float64bits(got[o][j]) != math.Float64bits(first[o][j]) {
							t.Fatalf("%v %v: %s[%d] with %d workers = %v, with 1 worker = %v",
								k, dt, [3]string{"dx", "dw", "db"}[o], j, workers, got[o][j], first[o][j])
						}
					}
				}
			}
		}
	}
}

// TestNormBlocksFixed pins the property the determinism rests on: the row
// blocking depends on N and C only, and covers every row once.
func TestNormBlocksFixed(t *testing.T) {
	for _, n := range []int{1, 2, 63, 64, 65, 1000, 3001, 1 << 20} {
		for _, c := range []int{1, 7, 64, 257, 4096} {
			nb, rb := normBlocks(n, c)
			if nb < 1 || nb > maxNormBlocks || (nb-1)*rb >= n || nb*rb < n {
				t.Errorf("normBlocks(%d, %d) = %d blocks of %d rows", n, c, nb, rb)
			}
		}
	}
}

// ---------------------------------------------------------------------------

func BenchmarkRMSNormF32(bb *testing.B) {
	b := New()
	rng := rand.New(rand.NewPCG(13, 14))
	shape := []int{rkBenchN, rkBenchC}
	x, y := rkView(backend.Float32, shape, rkNormal(rng, rkBenchN*rkBenchC, 1, 0)), rkView(backend.Float32, shape, nil)
	w, rstd := rkView(backend.Float32, []int{rkBenchC}, rkNormal(rng, rkBenchC, 1, 1)), rkView(backend.Float32, []int{rkBenchN}, nil)
	bb.SetBytes(int64(2 * 4 * rkBenchN * rkBenchC))
	for bb.Loop() {
		b.RMSNorm(y, rstd, x, w, 1e-6)
	}
}

func BenchmarkRMSNormBackwardF32(bb *testing.B) {
	b := New()
	rng := rand.New(rand.NewPCG(13, 14))
	shape := []int{rkBenchN, rkBenchC}
	x, dy, dx := rkView(backend.Float32, shape, rkNormal(rng, rkBenchN*rkBenchC, 1, 0)),
		rkView(backend.Float32, shape, rkNormal(rng, rkBenchN*rkBenchC, 1, 0)), rkView(backend.Float32, shape, nil)
	w, dw := rkView(backend.Float32, []int{rkBenchC}, rkNormal(rng, rkBenchC, 1, 1)), rkView(backend.Float32, []int{rkBenchC}, nil)
	rstd := rkView(backend.Float32, []int{rkBenchN}, nil)
	b.RMSNorm(rkView(backend.Float32, shape, nil), rstd, x, w, 1e-6)
	bb.SetBytes(int64(3 * 4 * rkBenchN * rkBenchC))
	for bb.Loop() {
		b.RMSNormBackward(dx, dw, dy, x, w, rstd)
	}
}

func BenchmarkLayerNormF32(bb *testing.B) {
	b := New()
	rng := rand.New(rand.NewPCG(13, 14))
	shape := []int{rkBenchN, rkBenchC}
	x, y := rkView(backend.Float32, shape, rkNormal(rng, rkBenchN*rkBenchC, 1, 0)), rkView(backend.Float32, shape, nil)
	w, bias := rkView(backend.Float32, []int{rkBenchC}, rkNormal(rng, rkBenchC, 1, 1)), rkView(backend.Float32, []int{rkBenchC}, nil)
	mean, rstd := rkView(backend.Float32, []int{rkBenchN}, nil), rkView(backend.Float32, []int{rkBenchN}, nil)
	bb.SetBytes(int64(2 * 4 * rkBenchN * rkBenchC))
	for bb.Loop() {
		b.LayerNorm(y, mean, rstd, x, w, bias, 1e-5)
	}
}
