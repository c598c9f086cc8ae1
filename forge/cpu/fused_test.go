package cpu

import (
	"math"
	"math/rand"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// fusedVec returns a contiguous view of n elements of dt at an offset into
// a larger buffer, filled from vals (rounded to dt).
func fusedVec(b *Backend, dt backend.DType, vals []float64, off int) backend.View {
	buf := b.Alloc(dt, len(vals)+off+3)
	host := make([]float64, len(vals)+off+3)
	for i := range host {
		host[i] = 1e30 // sentinel
	}
	copy(host[off:], vals)
	ewWrite(b, buf, host)
	return backend.View{Buf: buf, Offset: off, Shape: []int{len(vals)}, Strides: []int{1}}
}

// fusedRead returns the n elements of v as float64s.
func fusedRead(b *Backend, v backend.View) []float64 {
	return readAll(b, v.Buf)[v.Offset : v.Offset+v.Numel()]
}

func fusedRandom(rng *rand.Rand, n int, scale float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64() * scale
	}
	return v
}

// TestSwiGLUMatchesComposition checks the fused SwiGLU against the unfused
// kernels it replaces, bit for bit (Unary SiLU then Binary Mul; backward
// Binary Mul, UnaryGrad SiLU and Binary Mul), and against a float64
// reference, for several lengths (block tails) and worker counts.
func TestSwiGLUMatchesComposition(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, dt := range ewDTypes {
		for _, n := range []int{1, 7, 255, 256, 257, 1000, 70000} {
			a := fusedRandom(rng, n, 3)
			bv := fusedRandom(rng, n, 1)
			g := fusedRandom(rng, n, 1)
			a[0] = -100 // saturated sigmoid
			if n > 1 {
				a[1] = 40
			}
			var first [3][]float64
			for _, workers := range []int{1, 2, 3} {
				be := ewBackend(workers)
				av, bb, gv := fusedVec(be, dt, a, 1), fusedVec(be, dt, bv, 2), fusedVec(be, dt, g, 0)
				y := fusedVec(be, dt, make([]float64, n), 0)
				be.SwiGLU(y, av, bb)
				// The composition.
				s := fusedVec(be, dt, make([]float64, n), 0)
				yc := fusedVec(be, dt, make([]float64, n), 0)
				be.Unary(backend.SiLU, backend.Scalars{}, s, av)
				be.Binary(backend.Mul, yc, s, bb)
				da := fusedVec(be, dt, make([]float64, n), 0)
				db := fusedVec(be, dt, make([]float64, n), 3)
				be.SwiGLUBackward(da, db, av, bb, gv)
				gb := fusedVec(be, dt, make([]float64, n), 0)
				dac := fusedVec(be, dt, make([]float64, n), 0)
				dbc := fusedVec(be, dt, make([]float64, n), 0)
				be.Binary(backend.Mul, gb, gv, bb)
				be.UnaryGrad(backend.SiLU, backend.Scalars{}, dac, av, s, gb)
				be.Binary(backend.Mul, dbc, gv, s)

				got := [3][]float64{fusedRead(be, y), fusedRead(be, da), fusedRead(be, db)}
				want := [3][]float64{fusedRead(be, yc), fusedRead(be, dac), fusedRead(be, dbc)}
				for k, name := range []string{"y", "da", "db"} {
					for i := range got[k] {
						if math.Float64bits(got[k][i]) != math.Float64bits(want[k][i]) {
							t.Fatalf("%v n=%d workers=%d %s[%d]: fused %v, composition %v", dt, n, workers, name, i, got[k][i], want[k][i])
						}
					}
					if first[k] == nil {
						first[k] = got[k]
					}
				}
				// Float64 reference of the formulas.
				for i := range a {
					x, bi, gi := ewRound(dt, a[i]), ewRound(dt, bv[i]), ewRound(dt, g[i])
					sg := 1 / (1 + math.Exp(-x))
					ref := [3]float64{x * sg * bi, gi * bi * sg * (1 + x*(1-sg)), gi * x * sg}
					for k := range ref {
						abs := 1e-300
						if dt == backend.Float32 {
							abs = 1e-37 // float32 denormals carry few bits
						}
						if !ewClose(got[k][i], ref[k], 4*ewTol(dt), abs) {
							t.Fatalf("%v n=%d %d[%d]: %v, float64 reference %v", dt, n, k, i, got[k][i], ref[k])
						}
					}
				}
			}
		}
	}
}

// TestSumSquares checks SumSquares against a float64 (compensated) sum for
// several lengths, and that the result is bit-identical for any number of
// workers.
func TestSumSquares(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, dt := range ewDTypes {
		for _, n := range []int{1, 3, 4, 5, 1000, sumSqBlock, sumSqBlock + 1, 5*sumSqBlock + 77} {
			x := fusedRandom(rng, n, 0.01)
			var ref, comp float64 // Kahan sum of the rounded values' squares
			for _, v := range x {
				r := ewRound(dt, v)
				y := r*r - comp
				s := ref + y
				comp = (s - ref) - y
				ref = s
			}
			var first float64
			for wi, workers := range []int{1, 2, 3, 8} {
				be := ewBackend(workers)
				src := fusedVec(be, dt, x, 5)
				dst := fusedVec(be, dt, []float64{7, 7, 7}, 0)
				dst1 := backend.View{Buf: dst.Buf, Offset: 1, Shape: []int{}, Strides: []int{}}
				be.SumSquares(dst1, src)
				out := fusedRead(be, dst)
				if out[0] != 7 || out[2] != 7 {
					t.Fatalf("%v n=%d: wrote outside the one-element dst: %v", dt, n, out)
				}
				got := out[1]
				if wi == 0 {
					first = got
				} else if math.Float64bits(got) != math.Float64bits(first) {
					t.Fatalf("%v n=%d: %d workers give %v, 1 worker %v", dt, n, workers, got, first)
				}
				tol := 1e-14
				if dt == backend.Float32 {
					tol = 6e-8
				}
				if math.Abs(got-ref) > tol*ref {
					t.Fatalf("%v n=%d: %v, reference %v", dt, n, got, ref)
				}
			}
		}
	}
}

// adamwRef is AdamW in float64 on the rounded inputs, each stored value
// rounded to dt, as PyTorch writes the formulas; step is the size of the
// update's gradient term, lr·m̂/(√v̂ + eps).
func adamwRef(dt backend.DType, p backend.AdamWParams, w, g, m, v float64) (w2, m2, v2, step float64) {
	t := float64(p.Step)
	m2 = ewRound(dt, p.Beta1*m+(1-p.Beta1)*g)
	v2 = ewRound(dt, p.Beta2*v+(1-p.Beta2)*g*g)
	mhat := m2 / (1 - math.Pow(p.Beta1, t))
	vhat := v2 / (1 - math.Pow(p.Beta2, t))
	step = p.LR * mhat / (math.Sqrt(vhat) + p.Eps)
	w2 = ewRound(dt, w*(1-p.LR*p.WeightDecay)-step)
	return
}

// TestAdamW checks the fused AdamW update over several steps against the
// float64 reference, with and without weight decay, and that workers do
// not change a bit.
func TestAdamW(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for _, dt := range ewDTypes {
		for _, n := range []int{1, 9, 4099, 70001} {
			for _, wd := range []float64{0, 0.1} {
				w0 := fusedRandom(rng, n, 0.5)
				var firstW []float64
				for wi, workers := range []int{1, 2, 3} {
					be := ewBackend(workers)
					w := fusedVec(be, dt, w0, 1)
					m := fusedVec(be, dt, make([]float64, n), 2)
					v := fusedVec(be, dt, make([]float64, n), 0)
					rw, rm, rv := make([]float64, n), make([]float64, n), make([]float64, n)
					for i := range rw {
						rw[i] = ewRound(dt, w0[i])
					}
					grng := rand.New(rand.NewSource(int64(n)))
					for step := 1; step <= 4; step++ {
						gs := fusedRandom(grng, n, 1e-2)
						if step == 3 {
							gs[0] = 0 // v can go to 0 only through eps
						}
						g := fusedVec(be, dt, gs, 4)
						p := backend.AdamWParams{LR: 1e-2 * float64(step), Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: wd, Step: step}
						be.AdamW(w, g, m, v, p)
						gw, gm, gv := fusedRead(be, w), fusedRead(be, m), fusedRead(be, v)
						for i := range rw {
							var stepTerm float64
							rw[i], rm[i], rv[i], stepTerm = adamwRef(dt, p, rw[i], ewRound(dt, gs[i]), rm[i], rv[i])
							tol, u := 1e-13, 0x1p-53
							if dt == backend.Float32 {
								tol, u = 2e-7, 0x1p-24
							}
							// m and v are each rounded to dt once; whether the
							// multiply-adds before that rounding are fused (Go
							// fuses x·y+z on arm64, not on amd64) can put a
							// stored m or v one ulp, 2u relative, either way.
							// The step ∝ m/√v then moves by up to 3u of itself
							// on top of w's own rounding (in tol): w's bound
							// gets 4u·|step|.
							absW := 4*u*math.Abs(stepTerm) + 1e-15
							for k, pair := range [3][2]float64{{gw[i], rw[i]}, {gm[i], rm[i]}, {gv[i], rv[i]}} {
								abs := 1e-15
								if k == 0 {
									abs = absW
								}
								if !ewClose(pair[0], pair[1], tol, abs) {
									t.Fatalf("%v n=%d wd=%v step %d: %c[%d] = %v, reference %v", dt, n, wd, step, "wmv"[k], i, pair[0], pair[1])
								}
							}
							// Use the kernel's values as the next step's state, so
							// the comparison stays per step.
							rw[i], rm[i], rv[i] = gw[i], gm[i], gv[i]
						}
					}
					got := fusedRead(be, w)
					if wi == 0 {
						firstW = got
						continue
					}
					for i := range got {
						if math.Float64bits(got[i]) != math.Float64bits(firstW[i]) {
							t.Fatalf("%v n=%d: %d workers change w[%d]: %v vs %v", dt, n, workers, i, got[i], firstW[i])
						}
					}
				}
			}
		}
	}
}

func BenchmarkAdamW(bb *testing.B) {
	be := New()
	const n = 1 << 20
	rng := rand.New(rand.NewSource(1))
	w := fusedVec(be, backend.Float32, fusedRandom(rng, n, 0.02), 0)
	g := fusedVec(be, backend.Float32, fusedRandom(rng, n, 1e-3), 0)
	m := fusedVec(be, backend.Float32, fusedRandom(rng, n, 1e-4), 0)
	v := fusedVec(be, backend.Float32, fusedRandom(rng, n, 1e-4), 0)
	for i, x := range f32(v) {
		f32(v)[i] = x * x
	}
	p := backend.AdamWParams{LR: 3e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 10}
	bb.SetBytes(n * 4 * 7)
	for bb.Loop() {
		be.AdamW(w, g, m, v, p)
	}
}

func BenchmarkSumSquares(bb *testing.B) {
	be := New()
	const n = 1 << 20
	rng := rand.New(rand.NewSource(1))
	x := fusedVec(be, backend.Float32, fusedRandom(rng, n, 0.02), 0)
	d := fusedVec(be, backend.Float32, []float64{0}, 0)
	d0 := backend.View{Buf: d.Buf, Shape: []int{}, Strides: []int{}}
	bb.SetBytes(n * 4)
	for bb.Loop() {
		be.SumSquares(d0, x)
	}
}

func BenchmarkSwiGLU(bb *testing.B) {
	be := New()
	const n = 2048 * 512
	rng := rand.New(rand.NewSource(1))
	a := fusedVec(be, backend.Float32, fusedRandom(rng, n, 1), 0)
	b := fusedVec(be, backend.Float32, fusedRandom(rng, n, 1), 0)
	g := fusedVec(be, backend.Float32, fusedRandom(rng, n, 1), 0)
	y := fusedVec(be, backend.Float32, make([]float64, n), 0)
	db := fusedVec(be, backend.Float32, make([]float64, n), 0)
	bb.Run("forward", func(bb *testing.B) {
		bb.SetBytes(n * 4 * 3)
		for bb.Loop() {
			be.SwiGLU(y, a, b)
		}
	})
	bb.Run("backward", func(bb *testing.B) {
		bb.SetBytes(n * 4 * 5)
		for bb.Loop() {
			be.SwiGLUBackward(y, db, a, b, g)
		}
	})
	// The unfused kernels it replaces, for comparison.
	s := fusedVec(be, backend.Float32, make([]float64, n), 0)
	t := fusedVec(be, backend.Float32, make([]float64, n), 0)
	bb.Run("forward-unfused", func(bb *testing.B) {
		bb.SetBytes(n * 4 * 3)
		for bb.Loop() {
			be.Unary(backend.SiLU, backend.Scalars{}, s, a)
			be.Binary(backend.Mul, y, s, b)
		}
	})
	bb.Run("backward-unfused", func(bb *testing.B) {
		bb.SetBytes(n * 4 * 5)
		for bb.Loop() {
			be.Binary(backend.Mul, t, g, b)
			be.UnaryGrad(backend.SiLU, backend.Scalars{}, y, a, s, t)
			be.Binary(backend.Mul, db, g, s)
		}
	})
}
