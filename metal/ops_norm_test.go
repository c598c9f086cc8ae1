package metal

// The norm, RoPE and fused training-step ops (ops_norm.go, ops_rope.go,
// ops_fused.go) against the CPU backend on the emulator, on sizes that hit
// every path: rows of one simdgroup and of a threadgroup, short rows (C < 32)
// and long ones (C > 4096), several row blocks for the weight gradients,
// absent weights and biases, strided RoPE inputs, table growth, SumSquares
// over one and many blocks, and AdamW over hundreds of steps.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

// nfNormShapes are (N, C) pairs: one simdgroup per row (C ≤ 512) with a
// partial last threadgroup, a threadgroup per row (C > 512), C < 32, C = 1.
var nfNormShapes = [][2]int{{1, 1}, {3, 8}, {13, 5}, {9, 33}, {5, 512}, {4, 513}, {3, 1000}, {2, 4099}, {70, 64}}

// nfNoView is an absent optional operand.
var nfNoView = pair{}

// optView is p's view picked by pick, or an absent view for an absent p.
func optView(p pair, pick func(pair) backend.View) backend.View {
	if p.dev.Buf == nil {
		return backend.View{}
	}
	return pick(p)
}

func TestOpsRMSNorm(t *testing.T) {
	e := newOpsEnv(t)
	worstF, worstB := 0.0, 0.0
	for _, sh := range nfNormShapes {
		n, c := sh[0], sh[1]
		for _, withW := range []bool{true, false} {
			x := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 2 * e.rng.NormFloat64() })
			w := nfNoView
			if withW {
				w = e.newPair(backend.Float32, contig(c), e.uniform(0.5, 1.5))
			}
			y := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 7 })
			rstd := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.RMSNorm(v(y), v(rstd), v(x), optView(w, v), 1e-6)
			})
			what := fmt.Sprintf("rms_norm %dx%d w=%v", n, c, withW)
			worstF = max(worstF, e.compare(what+" y", y, opsTol), e.compare(what+" rstd", rstd, opsTol))

			// Backward from the CPU's rstd on both.
			rs := e.nfHostCopy(rstd)
			dy := e.newPair(backend.Float32, contig(n, c), e.normal)
			dx := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 7 })
			for _, withDW := range []bool{true, false} {
				dw := nfNoView
				if withDW {
					dw = e.newPair(backend.Float32, contig(c), func(int) float64 { return 7 })
				}
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.RMSNormBackward(v(dx), optView(dw, v), v(dy), v(x), optView(w, v), v(rs))
				})
				what := fmt.Sprintf("rms_norm_backward %dx%d w=%v dw=%v", n, c, withW, withDW)
				worstB = max(worstB, e.compare(what+" dx", dx, opsTol))
				if withDW {
					worstB = max(worstB, e.compare(what+" dw", dw, opsTol))
				}
			}
		}
	}
	t.Logf("rms_norm maxdiff: forward %.2e, backward %.2e", worstF, worstB)
}

// nfHostCopy is a fresh pair holding the CPU's contents of p (so that a
// backward reads the same saved statistics on both devices).
func (e *opsEnv) nfHostCopy(p pair) pair {
	h := make([]float32, p.n)
	e.ref.Read(p.ref.Buf, h)
	s := vspec{shape: p.dev.Shape, strides: p.dev.Strides, off: p.dev.Offset}
	return e.newPair(backend.Float32, s, func(i int) float64 { return float64(h[i]) })
}

func TestOpsLayerNorm(t *testing.T) {
	e := newOpsEnv(t)
	worstF, worstB := 0.0, 0.0
	for _, sh := range nfNormShapes {
		n, c := sh[0], sh[1]
		for mode := 0; mode < 4; mode++ { // bit 0: w, bit 1: b
			withW, withB := mode&1 != 0, mode&2 != 0
			shift := 0.0
			if mode == 3 {
				shift = 1000 // a mean far from zero against a spread of 1
			}
			x := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return shift + e.rng.NormFloat64() })
			w, bias := nfNoView, nfNoView
			if withW {
				w = e.newPair(backend.Float32, contig(c), e.uniform(0.5, 1.5))
			}
			if withB {
				bias = e.newPair(backend.Float32, contig(c), e.normal)
			}
			y := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 7 })
			mean := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
			rstd := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.LayerNorm(v(y), v(mean), v(rstd), v(x), optView(w, v), optView(bias, v), 1e-5)
			})
			what := fmt.Sprintf("layer_norm %dx%d w=%v b=%v shift=%v", n, c, withW, withB, shift)
			worstF = max(worstF, e.compare(what+" y", y, opsTol), e.compare(what+" mean", mean, opsTol),
				e.compare(what+" rstd", rstd, opsTol))

			mu, rs := e.nfHostCopy(mean), e.nfHostCopy(rstd)
			dy := e.newPair(backend.Float32, contig(n, c), e.normal)
			dx := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 7 })
			for grads := 0; grads < 4; grads++ {
				dw, db := nfNoView, nfNoView
				if grads&1 != 0 {
					dw = e.newPair(backend.Float32, contig(c), func(int) float64 { return 7 })
				}
				if grads&2 != 0 {
					db = e.newPair(backend.Float32, contig(c), func(int) float64 { return 7 })
				}
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.LayerNormBackward(v(dx), optView(dw, v), optView(db, v), v(dy), v(x), optView(w, v), v(mu), v(rs))
				})
				what := fmt.Sprintf("layer_norm_backward %dx%d w=%v shift=%v dw=%v db=%v", n, c, withW, shift, grads&1 != 0, grads&2 != 0)
				worstB = max(worstB, e.compare(what+" dx", dx, opsTol))
				if dw.dev.Buf != nil {
					worstB = max(worstB, e.compare(what+" dw", dw, opsTol))
				}
				if db.dev.Buf != nil {
					worstB = max(worstB, e.compare(what+" db", db, opsTol))
				}
			}
		}
	}
	// Without saved statistics (nil mean and rstd).
	x := e.newPair(backend.Float32, contig(6, 40), e.normal)
	y := e.newPair(backend.Float32, contig(6, 40), func(int) float64 { return 7 })
	y2 := e.newPair(backend.Float32, contig(6, 40), func(int) float64 { return 7 })
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.LayerNorm(v(y), backend.View{}, backend.View{}, v(x), backend.View{}, backend.View{}, 1e-5)
		be.RMSNorm(v(y2), backend.View{}, v(y), backend.View{}, 1e-5)
	})
	e.compare("layer_norm without saved stats", y, opsTol)
	e.compare("rms_norm without saved stats", y2, opsTol)
	t.Logf("layer_norm maxdiff: forward %.2e, backward %.2e", worstF, worstB)
}

// TestOpsNormParamGradBlocks covers weight gradients over many row blocks
// (a short last block) and over no rows at all (zeros).
func TestOpsNormParamGradBlocks(t *testing.T) {
	e := newOpsEnv(t)
	for _, sh := range [][2]int{{3001, 8}, {40, 4099}, {1030, 70}, {0, 9}} {
		n, c := sh[0], sh[1]
		nb, rb := normBlocking(n, c)
		x := e.newPair(backend.Float32, contig(n, c), e.normal)
		dy := e.newPair(backend.Float32, contig(n, c), e.normal)
		mu := e.newPair(backend.Float32, contig(n), e.normal)
		rs := e.newPair(backend.Float32, contig(n), e.uniform(0.5, 2))
		dw := e.newPair(backend.Float32, contig(c), func(int) float64 { return 7 })
		db := e.newPair(backend.Float32, contig(c), func(int) float64 { return 7 })
		dw2 := e.newPair(backend.Float32, contig(c), func(int) float64 { return 7 })
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.LayerNormBackward(backend.View{}, v(dw), v(db), v(dy), v(x), backend.View{}, v(mu), v(rs))
			be.RMSNormBackward(backend.View{}, v(dw2), v(dy), v(x), backend.View{}, v(rs))
		})
		what := fmt.Sprintf("%dx%d (%d blocks of %d rows)", n, c, nb, rb)
		// The sums are compensated end to end (products, partials, total):
		// within an ulp or two of the CPU's float64 sums.
		const tol = 2.5e-7
		wW := e.compare("layer_norm dw "+what, dw, tol)
		wB := e.compare("layer_norm db "+what, db, tol)
		wR := e.compare("rms_norm dw "+what, dw2, tol)
		t.Logf("param grads %s: maxdiff dw %.2e db %.2e rms dw %.2e", what, wW, wB, wR)
	}
}

func TestOpsRoPE(t *testing.T) {
	e := newOpsEnv(t)
	worst := 0.0
	for _, c := range []struct {
		shape []int
		pos0  int
		theta float64
	}{
		{[]int{2, 5, 6}, 3, 10000},
		{[]int{3, 7, 64}, 5000, 10000}, // large angles
		{[]int{1, 33, 128}, 0, 500000},
		{[]int{4, 1, 2}, 17, 10},
		{[]int{2, 3, 4, 8}, 1, 10000},
		{[]int{2, 3, 16}, 100000, 10000}, // far positions: a table of its own
		{[]int{2, 4, 16}, -5, 10000},     // negative positions (the backend allows them)
	} {
		for _, inverse := range []bool{false, true} {
			x := e.newPair(backend.Float32, contig(c.shape...), e.normal)
			y := e.newPair(backend.Float32, contig(c.shape...), func(int) float64 { return 7 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.RoPE(v(y), v(x), c.pos0, c.theta, inverse) })
			worst = max(worst, e.compare(fmt.Sprintf("rope %v pos0 %d theta %v inverse %v", c.shape, c.pos0, c.theta, inverse), y, opsTol))
			// In place.
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.RoPE(v(x), v(x), c.pos0, c.theta, inverse) })
			worst = max(worst, e.compare(fmt.Sprintf("rope in place %v inverse %v", c.shape, inverse), x, opsTol))
		}
	}
	// Decoding: one position at a time grows the table past its capacity.
	x := e.newPair(backend.Float32, contig(2, 3, 1, 16), e.normal)
	for pos := 0; pos < 200; pos += 7 {
		y := e.newPair(backend.Float32, contig(2, 3, 1, 16), func(int) float64 { return 7 })
		e.both(func(be backend.Backend, v func(pair) backend.View) { be.RoPE(v(y), v(x), pos, 10000, false) })
		worst = max(worst, e.compare(fmt.Sprintf("rope decode pos %d", pos), y, opsTol))
	}
	// Forward then inverse is the identity (to rounding).
	y := e.newPair(backend.Float32, contig(2, 9, 32), func(int) float64 { return 7 })
	z := e.newPair(backend.Float32, contig(2, 9, 32), func(int) float64 { return 7 })
	x2 := e.newPair(backend.Float32, contig(2, 9, 32), e.normal)
	e.dev.RoPE(y.dev, x2.dev, 11, 10000, false)
	e.dev.RoPE(z.dev, y.dev, 11, 10000, true)
	got, _ := e.read(z)
	want, _ := e.read(x2)
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-5*max(1, math.Abs(want[i])) {
			t.Fatalf("rope then inverse: element %d: %g, want %g", i, got[i], want[i])
		}
	}
	t.Logf("rope maxdiff %.2e", worst)
}

// nfQKVHead is head view of a fused QKV projection (B, T, 3, H, D) seen as
// (B, H, T, D): which = 0 (q), 1 (k) or 2 (v), with an offset.
func nfQKVHead(b, tt, h, d, which int) (all, head vspec) {
	all = vspec{shape: []int{b, tt, 3, h, d}, off: 3}
	full := all.full()
	st := full.strides
	head = vspec{shape: []int{b, h, tt, d}, strides: []int{st[0], st[3], st[1], 1}, off: 3 + which*st[2]}
	return all, head
}

// manyDimsRows is manyDims with a contiguous last axis of d: rows of d
// over more row axes than the kernels index.
func manyDimsRows(d int) vspec {
	md := manyDims()
	md.shape = append(md.shape, d)
	for i := range md.strides {
		md.strides[i] *= d
	}
	md.strides = append(md.strides, 1)
	return md
}

func TestOpsRoPEStrided(t *testing.T) {
	e := newOpsEnv(t)
	worst := 0.0
	for _, c := range [][4]int{{2, 5, 3, 8}, {1, 17, 4, 64}, {3, 1, 2, 2}} {
		for which := 0; which < 2; which++ {
			all, head := nfQKVHead(c[0], c[1], c[2], c[3], which)
			x := e.newPair(backend.Float32, all, e.normal)
			xv := x
			hv := head.full()
			xv.dev.Shape, xv.dev.Strides, xv.dev.Offset = hv.shape, hv.strides, hv.off
			xv.ref.Shape, xv.ref.Strides, xv.ref.Offset = hv.shape, hv.strides, hv.off
			for _, inverse := range []bool{false, true} {
				y := e.newPair(backend.Float32, contig(hv.shape...), func(int) float64 { return 7 })
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.RoPEStrided(v(y), v(xv), 2, 10000, inverse)
				})
				worst = max(worst, e.compare(fmt.Sprintf("rope strided %v which %d inverse %v", c, which, inverse), y, opsTol))
			}
		}
	}
	// More row axes than the kernel indexes (a contiguous copy first), and
	// rank 2.
	md := manyDimsRows(4)
	x := e.newPair(backend.Float32, md, e.normal)
	y := e.newPair(backend.Float32, contig(md.shape...), func(int) float64 { return 7 })
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.RoPEStrided(v(y), v(x), 4, 10000, false)
	})
	worst = max(worst, e.compare("rope strided many dims", y, opsTol))
	x2 := e.newPair(backend.Float32, vspec{shape: []int{5, 6}, strides: []int{10, 1}, off: 1}, e.normal)
	y2 := e.newPair(backend.Float32, contig(5, 6), func(int) float64 { return 7 })
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.RoPEStrided(v(y2), v(x2), 0, 10000, true)
	})
	worst = max(worst, e.compare("rope strided rank 2", y2, opsTol))
	t.Logf("rope strided maxdiff %.2e", worst)
}

// TestOpsSwiGLU checks SwiGLU against the unfused composition on the same
// device bit for bit, and against the CPU within the tolerance.
func TestOpsSwiGLU(t *testing.T) {
	e := newOpsEnv(t)
	for _, n := range []int{1, 37 * 300, 5000} {
		a := e.newPair(backend.Float32, contig(n), func(int) float64 { return 6 * e.rng.NormFloat64() })
		bb := e.newPair(backend.Float32, contig(n), func(int) float64 { return 2 * e.rng.NormFloat64() })
		g := e.newPair(backend.Float32, contig(n), e.normal)
		y := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
		da := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
		db := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.SwiGLU(v(y), v(a), v(bb))
			be.SwiGLUBackward(v(da), v(db), v(a), v(bb), v(g))
		})
		wy := e.compare(fmt.Sprintf("swiglu %d y", n), y, opsTol)
		wa := e.compare(fmt.Sprintf("swiglu %d da", n), da, opsTol)
		wb := e.compare(fmt.Sprintf("swiglu %d db", n), db, opsTol)

		// The composition on the device: s = silu(a), y = s·b; gb = g·b,
		// db = g·s, da = SiLU'(a)·gb.
		s := e.dev.Alloc(backend.Float32, n)
		y2, gb, da2, db2 := e.dev.Alloc(backend.Float32, n), e.dev.Alloc(backend.Float32, n), e.dev.Alloc(backend.Float32, n), e.dev.Alloc(backend.Float32, n)
		v := func(buf backend.Buffer) backend.View {
			return backend.View{Buf: buf, Shape: []int{n}, Strides: []int{1}}
		}
		e.dev.Unary(backend.SiLU, backend.Scalars{}, v(s), a.dev)
		e.dev.Binary(backend.Mul, v(y2), v(s), bb.dev)
		e.dev.Binary(backend.Mul, v(gb), g.dev, bb.dev)
		e.dev.Binary(backend.Mul, v(db2), g.dev, v(s))
		e.dev.UnaryGrad(backend.SiLU, backend.Scalars{}, v(da2), a.dev, v(s), v(gb))
		for _, c := range []struct {
			name      string
			got, want backend.Buffer
		}{{"y", y.dev.Buf, y2}, {"da", da.dev.Buf, da2}, {"db", db.dev.Buf, db2}} {
			gh, wh := make([]float32, n), make([]float32, n)
			e.dev.Read(c.got, gh)
			e.dev.Read(c.want, wh)
			for i := range gh {
				if math.Float32bits(gh[i]) != math.Float32bits(wh[i]) {
					t.Errorf("swiglu %d %s: element %d: fused %g, composition %g", n, c.name, i, gh[i], wh[i])
					break
				}
			}
		}
		t.Logf("swiglu n=%d maxdiff vs cpu: y %.2e da %.2e db %.2e; bit-equal to the device's composition", n, wy, wa, wb)
	}
}

func TestOpsSumSquares(t *testing.T) {
	e := newOpsEnv(t)
	for _, n := range []int{0, 1, 1000, sumSqBlock, sumSqBlock + 1, 5*sumSqBlock + 777, 300000} {
		src := e.newPair(backend.Float32, contig(n), func(int) float64 { return 3 * e.rng.NormFloat64() })
		dst := e.newPair(backend.Float32, vspec{shape: []int{1}, strides: []int{1}, off: 5}, func(int) float64 { return 7 })
		e.both(func(be backend.Backend, v func(pair) backend.View) { be.SumSquares(v(dst), v(src)) })
		w := e.compare(fmt.Sprintf("sum_squares %d", n), dst, 1e-6)
		// Against a float64 sum of the float32 inputs.
		h := make([]float32, src.n)
		e.dev.Read(src.dev.Buf, h)
		var want float64
		for _, x := range h[:n] {
			want += float64(x) * float64(x)
		}
		got, _ := e.read(dst)
		rel := math.Abs(got[5]-want) / max(want, 1e-30)
		if n > 0 && rel > 6e-8 { // half an ulp, and a little
			t.Errorf("sum_squares %d: %g, float64 sum %g (rel %.2e)", n, got[5], want, rel)
		}
		t.Logf("sum_squares n=%d: maxdiff vs cpu %.2e, vs float64 sum %.2e", n, w, rel)
	}
}

// TestOpsAdamW runs a few hundred AdamW steps on both devices from the same
// start, each device on its own state, and reports how far they drift.
func TestOpsAdamW(t *testing.T) {
	e := newOpsEnv(t)
	const n, steps = 3001, 300
	w := e.newPair(backend.Float32, contig(n), func(i int) float64 {
		if i%97 == 0 {
			return 0
		}
		return e.rng.NormFloat64()
	})
	m := e.newPair(backend.Float32, contig(n), func(int) float64 { return 0 })
	v := e.newPair(backend.Float32, contig(n), func(int) float64 { return 0 })
	g := e.newPair(backend.Float32, contig(n), func(int) float64 { return 0 })
	gh := make([]float32, n)
	worst := map[string]float64{}
	mismatch := map[string]int{}
	for step := 1; step <= steps; step++ {
		scale := math.Pow(10, float64(step%7)-4) // gradients from 1e-4 to 100
		for i := range gh {
			gh[i] = float32(scale * e.rng.NormFloat64())
			if i%101 == 0 {
				gh[i] = 0
			}
		}
		e.dev.Write(g.dev.Buf, gh)
		e.ref.Write(g.ref.Buf, gh)
		p := backend.AdamWParams{LR: 1e-3 * float64(1+step%3), Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: step}
		if step%50 == 0 {
			p.WeightDecay = 0
		}
		e.both(func(be backend.Backend, pick func(pair) backend.View) {
			be.AdamW(pick(w), pick(g), pick(m), pick(v), p)
		})
		if step%50 == 0 || step == steps {
			for name, q := range map[string]pair{"param": w, "m": m, "v": v} {
				got, want := e.read(q)
				for i := range got {
					if got[i] != want[i] {
						mismatch[name]++
					}
				}
				worst[name] = max(worst[name], e.compare(fmt.Sprintf("adamw step %d %s", step, name), q, opsTol))
			}
		}
	}
	// One step from identical states on both devices, many times: the
	// per-step agreement (the drift above accumulates single-ulp ties).
	oneStep := 0
	for step := 1; step <= 20; step++ {
		for _, q := range []pair{w, m, v} {
			h := make([]float32, n)
			e.ref.Read(q.ref.Buf, h)
			e.dev.Write(q.dev.Buf, h)
		}
		for i := range gh {
			gh[i] = float32(math.Pow(10, float64(step%7)-4) * e.rng.NormFloat64())
		}
		e.dev.Write(g.dev.Buf, gh)
		e.ref.Write(g.ref.Buf, gh)
		p := backend.AdamWParams{LR: 3e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: steps + step}
		e.both(func(be backend.Backend, pick func(pair) backend.View) {
			be.AdamW(pick(w), pick(g), pick(m), pick(v), p)
		})
		for k, q := range []pair{w, m, v} {
			got, want := e.read(q)
			for i := range got {
				if got[i] == want[i] {
					continue
				}
				oneStep++
				if d := nfULPs(float32(got[i]), float32(want[i])); d > 1 {
					t.Errorf("adamw single step %d: state %d element %d: %.9g, cpu %.9g (%d ulp)", step, k, i, got[i], want[i], d)
				}
			}
		}
	}
	// A tie of the float64 arithmetic (common: β1·m + (1−β1)·g often lands
	// on a float32 midpoint to within the coefficients' float64 rounding)
	// may round the other way; anything else is a bug.
	if oneStep*100 > 20*3*n {
		t.Errorf("adamw single steps: %d of %d stored values differ from the cpu (more than 1%%)", oneStep, 20*3*n)
	}
	t.Logf("adamw single steps from equal states: %d of %d stored values differ (each by 1 ulp)", oneStep, 20*3*n)
	t.Logf("adamw %d steps × %d elements: maxdiff param %.2e m %.2e v %.2e; elements differing in the last bit at checkpoints: param %d m %d v %d",
		steps, n, worst["param"], worst["m"], worst["v"], mismatch["param"], mismatch["m"], mismatch["v"])
}

// TestOpsNormFusedSchedules runs these kernels under the emulator's
// forward, reverse and random schedules: results must agree bit for bit.
func TestOpsNormFusedSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(5, 6))
	const n = 3 * sumSqBlock / 2
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(gen.NormFloat64())
	}
	run := func() [][]uint32 {
		var outs [][]uint32
		dev := e.dev
		up := func(k int) backend.Buffer {
			b := dev.Alloc(backend.Float32, k)
			dev.Write(b, in[:k])
			return b
		}
		v := contigView
		read := func(b backend.Buffer, k int) { outs = append(outs, readBits(dev, b, k)) }
		x := up(n)
		for _, sh := range [][2]int{{24, 1000}, {300, 40}} {
			r, c := sh[0], sh[1]
			y, mu, rs, dx, dw, db := dev.Alloc(backend.Float32, r*c), dev.Alloc(backend.Float32, r), dev.Alloc(backend.Float32, r),
				dev.Alloc(backend.Float32, r*c), dev.Alloc(backend.Float32, c), dev.Alloc(backend.Float32, c)
			w := v(x, 7, c)
			dev.LayerNorm(v(y, 0, r, c), v(mu, 0, r), v(rs, 0, r), v(x, 0, r, c), w, v(x, 3, c), 1e-5)
			dev.LayerNormBackward(v(dx, 0, r, c), v(dw, 0, c), v(db, 0, c), v(x, 11, r, c), v(x, 0, r, c), w, v(mu, 0, r), v(rs, 0, r))
			read(y, r*c)
			read(mu, r)
			read(rs, r)
			read(dx, r*c)
			read(dw, c)
			read(db, c)
			dev.RMSNorm(v(y, 0, r, c), v(rs, 0, r), v(x, 0, r, c), w, 1e-6)
			dev.RMSNormBackward(v(dx, 0, r, c), v(dw, 0, c), v(x, 11, r, c), v(x, 0, r, c), w, v(rs, 0, r))
			read(y, r*c)
			read(rs, r)
			read(dx, r*c)
			read(dw, c)
		}
		s := dev.Alloc(backend.Float32, 2)
		dev.Write(s, []float32{0, 0})
		dev.SumSquares(v(s, 1, 1), v(x, 0, n))
		read(s, 2)
		y := dev.Alloc(backend.Float32, 4*10*32)
		dev.RoPE(v(y, 0, 4, 10, 32), v(x, 0, 4, 10, 32), 9, 10000, false)
		read(y, 4*10*32)
		da, db := dev.Alloc(backend.Float32, 5000), dev.Alloc(backend.Float32, 5000)
		dev.SwiGLUBackward(v(da, 0, 5000), v(db, 0, 5000), v(x, 0, 5000), v(x, 1, 5000), v(x, 2, 5000))
		read(da, 5000)
		read(db, 5000)
		return outs
	}
	schedulesAgree(t, drv, run, nil)
}

func TestOpsNormFusedFloat64Refused(t *testing.T) {
	refusesFloat64(t, func(b *Backend, f64 backend.View) map[string]func() {
		return map[string]func(){
			kRMSNorm:       func() { b.RMSNorm(f64, f64, f64, f64, 1e-5) },
			kRMSNormBack:   func() { b.RMSNormBackward(f64, f64, f64, f64, f64, f64) },
			kLayerNorm:     func() { b.LayerNorm(f64, f64, f64, f64, f64, f64, 1e-5) },
			kLayerNormBack: func() { b.LayerNormBackward(f64, f64, f64, f64, f64, f64, f64, f64) },
			kRoPE:          func() { b.RoPE(f64, f64, 0, 10000, false) },
			kSwiGLU:        func() { b.SwiGLU(f64, f64, f64) },
			kSwiGLUBack:    func() { b.SwiGLUBackward(f64, f64, f64, f64, f64) },
			kSumSquares:    func() { b.SumSquares(f64, f64) },
			kAdamW:         func() { b.AdamW(f64, f64, f64, f64, backend.AdamWParams{Step: 1}) },
		}
	})
}

func TestOpsNormFusedKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{kRMSNorm, kRMSNormBack, kLayerNorm, kLayerNormBack, kNormParamGradBy[backend.Float32],
		kNormColSumBy[backend.Float32], kRoPE, kSwiGLU, kSwiGLUBack, kSumSquares, kAdamW} {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}

// nfULPs is the distance between two float32 values in units in the last
// place (the number of floats between them).
func nfULPs(a, b float32) int64 {
	key := func(x float32) int64 {
		u := int64(math.Float32bits(x))
		if u&(1<<31) != 0 {
			return -(u &^ (1 << 31))
		}
		return u
	}
	d := key(a) - key(b)
	if d < 0 {
		d = -d
	}
	return d
}

// Emulator timings of these kernels (go test -bench NormFused -run '^$'
// ./metal); they measure the emulation, not a GPU.
func BenchmarkOpsNormFused(b *testing.B) {
	dev := opsBenchDevice(b)
	up := func(shape ...int) backend.View { return benchView(dev, 0.1, shape...) }
	bench := func(name string, fn func()) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				fn()
				dev.Sync()
			}
		})
	}
	for _, c := range []int{64, 1024} {
		const rows = 64
		x, y, dx, dy := up(rows, c), up(rows, c), up(rows, c), up(rows, c)
		w, bb, dw, db := up(c), up(c), up(c), up(c)
		mu, rs := up(rows), up(rows)
		bench(fmt.Sprintf("rms_norm_%dx%d", rows, c), func() { dev.RMSNorm(y, rs, x, w, 1e-6) })
		bench(fmt.Sprintf("rms_norm_backward_%dx%d", rows, c), func() { dev.RMSNormBackward(dx, dw, dy, x, w, rs) })
		bench(fmt.Sprintf("layer_norm_%dx%d", rows, c), func() { dev.LayerNorm(y, mu, rs, x, w, bb, 1e-5) })
		bench(fmt.Sprintf("layer_norm_backward_%dx%d", rows, c), func() { dev.LayerNormBackward(dx, dw, db, dy, x, w, mu, rs) })
	}
	q, qy := up(4, 8, 128, 64), up(4, 8, 128, 64)
	bench("rope_4x8x128x64", func() { dev.RoPE(qy, q, 0, 10000, false) })
	a, bv, g, da, dbv := up(1<<20), up(1<<20), up(1<<20), up(1<<20), up(1<<20)
	bench("swiglu_1M", func() { dev.SwiGLU(da, a, bv) })
	bench("swiglu_backward_1M", func() { dev.SwiGLUBackward(da, dbv, a, bv, g) })
	s := up(1)
	bench("sum_squares_1M", func() { dev.SumSquares(s, a) })
	m, v := up(1<<20), up(1<<20)
	step := 0
	bench("adamw_1M", func() {
		step++
		dev.AdamW(da, g, m, v, backend.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: step})
	})
}

// TestOpsNormSpecialValues feeds rows holding NaN and ±Inf (one per row, in
// both row modes) through the norms and SumSquares: the results must be
// the CPU's (NaN where it has NaN).
func TestOpsNormSpecialValues(t *testing.T) {
	e := newOpsEnv(t)
	specials := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e30}
	for _, c := range []int{7, 700} {
		const n = 4
		gen := func(i int) float64 {
			if i%c == 3 {
				return specials[(i/c)%len(specials)]
			}
			return e.rng.NormFloat64()
		}
		x := e.newPair(backend.Float32, contig(n, c), gen)
		y := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 7 })
		y2 := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 7 })
		mu := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
		rs := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
		rs2 := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.LayerNorm(v(y), v(mu), v(rs), v(x), backend.View{}, backend.View{}, 1e-5)
			be.RMSNorm(v(y2), v(rs2), v(x), backend.View{}, 1e-5)
		})
		e.compare(fmt.Sprintf("layer_norm specials C=%d y", c), y, opsTol)
		e.compare(fmt.Sprintf("layer_norm specials C=%d rstd", c), rs, opsTol)
		e.compare(fmt.Sprintf("rms_norm specials C=%d y", c), y2, opsTol)
		e.compare(fmt.Sprintf("rms_norm specials C=%d rstd", c), rs2, opsTol)
	}
	for _, sp := range specials {
		src := e.newPair(backend.Float32, contig(40000), func(i int) float64 {
			if i == 20000 {
				return sp
			}
			return e.rng.NormFloat64()
		})
		dst := e.newPair(backend.Float32, contig(1), func(int) float64 { return 7 })
		e.both(func(be backend.Backend, v func(pair) backend.View) { be.SumSquares(v(dst), v(src)) })
		e.compare(fmt.Sprintf("sum_squares with %g", sp), dst, 1e-6)
	}
}
