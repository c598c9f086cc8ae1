package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

const rkIgnore = -100

// rkCEData returns (n, v) logits and n targets: scale-3 normals, with rows
// of large positive and large negative logits (±1e4, where an unshifted
// exp overflows), logits of 30 ± 10 (where float32 rounding of the saved
// lse matters), −Inf entries (targets away from them), ignored rows and a
// row whose target logit is −Inf (loss +Inf).
func rkCEData(rng *rand.Rand, n, v int) (x, tg []float64) {
	x = rkNormal(rng, n*v, 3, 0)
	tg = make([]float64, n)
	for r := 0; r < n; r++ {
		row := x[r*v : (r+1)*v]
		tg[r] = float64(rng.IntN(v))
		switch r % 8 {
		case 1:
			copy(row, rkNormal(rng, v, 10, 1e4))
		case 2:
			copy(row, rkNormal(rng, v, 10, -1e4))
		case 3:
			copy(row, rkNormal(rng, v, 10, 30))
		case 4:
			for j := 1; j < v; j += 2 {
				row[j] = math.Inf(-1)
			}
			tg[r] = float64(2 * rng.IntN((v+1)/2))
		case 5:
			tg[r] = rkIgnore
		case 6:
			// The target is the row maximum (the easy case, loss ≈ 0).
			tg[r] = 0
			row[0] = 50
		}
	}
	if n >= 8 && v > 1 {
		x[(n-1)*v+1] = math.Inf(-1)
		tg[n-1] = 1
	}
	return x, tg
}

// rkRefCE is the two-pass float64 cross-entropy: loss and lse per row.
func rkRefCE(x, tg []float64, n, v int) (loss, lse []float64) {
	loss, lse = make([]float64, n), make([]float64, n)
	for r := 0; r < n; r++ {
		row := x[r*v : (r+1)*v]
		m := math.Inf(-1)
		for _, z := range row {
			m = math.Max(m, z)
		}
		s := 0.0
		for _, z := range row {
			s += math.Exp(z - m)
		}
		lse[r] = m + math.Log(s)
		if t := int(tg[r]); t != rkIgnore {
			loss[r] = (math.Log(s) - (row[t] - m))
		}
	}
	return loss, lse
}

// rkRefCEGrad is scale·(softmax − onehot) in float64, zero for ignored rows.
func rkRefCEGrad(x, tg []float64, n, v int, scale float64) []float64 {
	g := rkRefSoftmax(x, n, v, false)
	for r := 0; r < n; r++ {
		t := int(tg[r])
		for j := 0; j < v; j++ {
			switch {
			case t == rkIgnore:
				g[r*v+j] = 0
			case j == t:
				g[r*v+j] = scale * (g[r*v+j] - 1)
			default:
				g[r*v+j] *= scale
			}
		}
	}
	return g
}

func rkVs() []int { return []int{1, 3, 7, 33, 257, 1000} }

func TestCrossEntropyForward(t *testing.T) {
	b := rkBackend(0)
	rng := rand.New(rand.NewPCG(41, 42))
	worst := rkWorst{}
	for _, v := range rkVs() {
		for _, n := range rkNs(v) {
			x, tg := rkCEData(rng, n, v)
			wantLoss, wantLSE := rkRefCE(x, tg, n, v)
			for _, dt := range rkDTypes {
				loss, lse := rkView(dt, []int{n}, nil), rkView(dt, []int{n}, nil)
				b.CrossEntropy(loss, lse, rkView(dt, []int{n, v}, x), rkView(backend.Int32, []int{n}, tg), rkIgnore)
				rkCheckPads(t, "cross_entropy loss", loss)
				rkCheckPads(t, "cross_entropy lse", lse)
				tol := 1e-12
				if dt == backend.Float32 {
					tol = 1e-6
				}
				gl := rkRead(loss)
				for r := range gl {
					if tg[r] == rkIgnore && gl[r] != 0 {
						t.Fatalf("cross_entropy %v N=%d V=%d: ignored row %d has loss %v", dt, n, v, r, gl[r])
					}
				}
				// Losses near 0 (the target dominates) are compared
				// absolutely at 1e-6 (float32 ulp of the logits' scale).
				for _, o := range []struct {
					what      string
					got, want []float64
					floor     float64
				}{{"loss", gl, wantLoss, 1e-6}, {"lse", rkRead(lse), wantLSE, 1e-300}} {
					e := rkRelErr(o.got, o.want, o.floor)
					name := fmt.Sprintf("cross_entropy %s %v", o.what, dt)
					worst.add(name, e)
					if e > tol {
						t.Errorf("%s N=%d V=%d: relative error %.3g > %.g", name, n, v, e, tol)
					}
				}
			}
		}
	}
	worst.log(t)
}

// TestCrossEntropySpecialRows pins the non-finite cases: a row of −Inf only
// gives NaN (as PyTorch), a −Inf target logit gives +Inf, and an ignored row
// gives 0 whatever its logits.
func TestCrossEntropySpecialRows(t *testing.T) {
	b := rkBackend(1)
	inf := math.Inf(1)
	x := []float64{
		-inf, -inf, -inf,
		0, -inf, 1,
		-inf, -inf, -inf,
		1e30, 1e30, -1e30,
	}
	tg := []float64{0, 1, rkIgnore, 2}
	for _, dt := range rkDTypes {
		loss, lse := rkView(dt, []int{4}, nil), rkView(dt, []int{4}, nil)
		xv, tv := rkView(dt, []int{4, 3}, x), rkView(backend.Int32, []int{4}, tg)
		b.CrossEntropy(loss, lse, xv, tv, rkIgnore)
		l := rkRead(loss)
		if !math.IsNaN(l[0]) || !math.IsInf(l[1], 1) || l[2] != 0 {
			t.Errorf("%v: losses %v, want [NaN +Inf 0 …]", dt, l)
		}
		if dt == backend.Float64 && (l[3] != 2e30 || rkRead(lse)[3] != 1e30+math.Ln2) {
			t.Errorf("%v: huge row: loss %v lse %v", dt, l[3], rkRead(lse)[3])
		}
		d := rkView(dt, []int{4, 3}, nil)
		b.CrossEntropyBackward(d, xv, lse, tv, backend.View{}, rkIgnore, 1)
		g := rkRead(d)
		if g[6] != 0 || g[7] != 0 || g[8] != 0 || g[4] != -1 {
			t.Errorf("%v: gradient %v: want an ignored row of zeros and −1 at a −Inf target", dt, g)
		}
	}
}

// TestCrossEntropyBackward checks the float64 backward against central
// differences of the float64 forward (L = scale·loss, row by row), and the
// float32 backward against the exact float64 gradient of the same logits.
func TestCrossEntropyBackward(t *testing.T) {
	b := rkBackend(0)
	rng := rand.New(rand.NewPCG(43, 44))
	worst := rkWorst{}
	for _, v := range rkVs() {
		for _, n := range rkNs(v) {
			x, tg := rkCEData(rng, n, v)
			// Only finite logits for the comparisons below.
			for i, z := range x {
				if math.IsInf(z, 0) {
					x[i] = -40
				}
			}
			scale := 1 / float64(n)
			want := rkRefCEGrad(x, tg, n, v, scale)
			grads := map[backend.DType][]float64{}
			for _, dt := range rkDTypes {
				xv, tv := rkView(dt, []int{n, v}, x), rkView(backend.Int32, []int{n}, tg)
				loss, lse := rkView(dt, []int{n}, nil), rkView(dt, []int{n}, nil)
				b.CrossEntropy(loss, lse, xv, tv, rkIgnore)
				d := rkView(dt, []int{n, v}, nil)
				b.CrossEntropyBackward(d, xv, lse, tv, backend.View{}, rkIgnore, scale)
				rkCheckPads(t, "cross_entropy_backward", d)
				grads[dt] = rkRead(d)
				// Against the exact gradient. Entries are relative to
				// max(|g|, 1e-3·scale) (float32 underflows below 1e-38).
				tol := 1e-12
				if dt == backend.Float32 {
					tol = 1e-6
				}
				e := rkRelErr(grads[dt], want, 1e-3*scale)
				name := fmt.Sprintf("cross_entropy_backward %v vs exact", dt)
				worst.add(name, e)
				if e > tol {
					t.Errorf("%s N=%d V=%d: relative error %.3g > %.g", name, n, v, e, tol)
				}
				for r := range tg {
					if tg[r] != rkIgnore {
						continue
					}
					for j := 0; j < v; j++ {
						if grads[dt][r*v+j] != 0 {
							t.Fatalf("%s N=%d V=%d: ignored row %d has gradient %v", name, n, v, r, grads[dt][r*v+j])
						}
					}
				}
			}
			// Finite differences of the float64 forward.
			d := grads[backend.Float64]
			for _, r := range rkSample(n, max(4, 6000/v)) {
				if tg[r] == rkIgnore {
					continue
				}
				xr := x[r*v : (r+1)*v]
				tv := rkView(backend.Int32, []int{1}, tg[r:r+1])
				f := func() (float64, float64) {
					loss, lse := rkView(backend.Float64, []int{1}, nil), rkView(backend.Float64, []int{1}, nil)
					b.CrossEntropy(loss, lse, rkView(backend.Float64, []int{1, v}, xr), tv, rkIgnore)
					l := scale * rkRead(loss)[0]
					return l, math.Abs(scale * rkRead(lse)[0])
				}
				e := rkFDErr(d[r*v:(r+1)*v], xr, nil, 0, f)
				worst.add("cross_entropy_backward vs finite differences", e)
				if e > 1e-6 {
					t.Errorf("cross_entropy_backward N=%d V=%d row %d: finite-difference relative error %.3g", n, v, r, e)
				}
			}
		}
	}
	worst.log(t)
}

// TestCrossEntropyBackwardInPlace checks dlogits = logits (llm.c's in-place
// gradient) gives the same result as separate buffers.
func TestCrossEntropyBackwardInPlace(t *testing.T) {
	b := rkBackend(0)
	rng := rand.New(rand.NewPCG(45, 46))
	const n, v = 300, 257
	x, tg := rkCEData(rng, n, v)
	for _, dt := range rkDTypes {
		xv, tv := rkView(dt, []int{n, v}, x), rkView(backend.Int32, []int{n}, tg)
		loss, lse := rkView(dt, []int{n}, nil), rkView(dt, []int{n}, nil)
		b.CrossEntropy(loss, lse, xv, tv, rkIgnore)
		sep := rkView(dt, []int{n, v}, nil)
		b.CrossEntropyBackward(sep, xv, lse, tv, backend.View{}, rkIgnore, 0.5)
		b.CrossEntropyBackward(xv, xv, lse, tv, backend.View{}, rkIgnore, 0.5)
		if i := rkBitsEqual(rkRead(xv), rkRead(sep)); i >= 0 {
			t.Errorf("%v: in-place gradient differs at %d: %v vs %v", dt, i, rkRead(xv)[i], rkRead(sep)[i])
		}
	}
}

func TestCrossEntropyBadTargetPanics(t *testing.T) {
	b := rkBackend(4)
	defer func() {
		if recover() == nil {
			t.Error("cross_entropy with target 5 of V=5 did not panic")
		}
	}()
	loss := rkView(backend.Float32, []int{2}, nil)
	b.CrossEntropy(loss, loss, rkView(backend.Float32, []int{2, 5}, nil), rkView(backend.Int32, []int{2}, []float64{0, 5}), rkIgnore)
}

func BenchmarkCrossEntropyF32(bb *testing.B) {
	b := New()
	rng := rand.New(rand.NewPCG(47, 48))
	x := rkView(backend.Float32, []int{rkBenchN, rkBenchV}, rkNormal(rng, rkBenchN*rkBenchV, 3, 0))
	tg := rkView(backend.Int32, []int{rkBenchN}, rkIndices(rng, rkBenchN, rkBenchV))
	loss, lse := rkView(backend.Float32, []int{rkBenchN}, nil), rkView(backend.Float32, []int{rkBenchN}, nil)
	bb.SetBytes(int64(4 * rkBenchN * rkBenchV))
	for bb.Loop() {
		b.CrossEntropy(loss, lse, x, tg, rkIgnore)
	}
}

func BenchmarkCrossEntropyBackwardF32(bb *testing.B) {
	b := New()
	rng := rand.New(rand.NewPCG(47, 48))
	x := rkView(backend.Float32, []int{rkBenchN, rkBenchV}, rkNormal(rng, rkBenchN*rkBenchV, 3, 0))
	tg := rkView(backend.Int32, []int{rkBenchN}, rkIndices(rng, rkBenchN, rkBenchV))
	loss, lse := rkView(backend.Float32, []int{rkBenchN}, nil), rkView(backend.Float32, []int{rkBenchN}, nil)
	b.CrossEntropy(loss, lse, x, tg, rkIgnore)
	d := rkView(backend.Float32, []int{rkBenchN, rkBenchV}, nil)
	bb.SetBytes(int64(2 * 4 * rkBenchN * rkBenchV))
	for bb.Loop() {
		b.CrossEntropyBackward(d, x, lse, tg, backend.View{}, rkIgnore, 1.0/rkBenchN)
	}
}

// TestCrossEntropyBackwardUpstream: the upstream gradient g multiplies the
// scale (dlogits = g·scale·(softmax − onehot)), read from its buffer in
// either float dtype; a nil g is 1.
func TestCrossEntropyBackwardUpstream(t *testing.T) {
	b := rkBackend(0)
	rng := rand.New(rand.NewPCG(45, 46))
	const n, v = 5, 7
	x, tg := rkCEData(rng, n, v)
	for _, dt := range rkDTypes {
		xv, tv := rkView(dt, []int{n, v}, x), rkView(backend.Int32, []int{n}, tg)
		lse := rkView(dt, []int{n}, nil)
		b.CrossEntropy(backend.View{}, lse, xv, tv, rkIgnore)
		want, got := rkView(dt, []int{n, v}, nil), rkView(dt, []int{n, v}, nil)
		b.CrossEntropyBackward(want, xv, lse, tv, backend.View{}, rkIgnore, 0.375)
		g := rkView(dt, []int{1}, []float64{3})
		b.CrossEntropyBackward(got, xv, lse, tv, g, rkIgnore, 0.125)
		w, gv := rkRead(want), rkRead(got)
		for i := range w {
			if math.Float64bits(w[i]) != math.Float64bits(gv[i]) && !(math.IsNaN(w[i]) && math.IsNaN(gv[i])) {
				t.Fatalf("%v element %d: g = 3, scale 1/8 gives %v; scale 3/8 gives %v", dt, i, gv[i], w[i])
			}
		}
	}
}
