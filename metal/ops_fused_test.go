package metal

// SwiGLU, SwiGLUBackward, SumSquares and AdamW (ops_fused.go) against the
// CPU backend: SwiGLU also against the unfused composition on the device,
// SumSquares over one and many blocks and with NaN and ±Inf, AdamW over
// hundreds of steps; float16 and bfloat16 SwiGLU and SumSquares sources
// against the float32 kernels on the widened inputs and the CPU (check16,
// ops_layout_test.go: bit for bit the float32 kernel's result rounded once
// on the emulator, and within ulp16/2 + tol32 of the CPU's, tol32 as in
// the float32 test); bit-identical results across thread schedules; the
// refused dtypes (AdamW is float32 only).

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

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

func TestMiscHalfSumSquares(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		var w halfWorst
		worstRel := 0.0
		for _, n := range []int{0, 1, 1000, sumSqBlock + 1, 3*sumSqBlock/2 + 77} {
			what := fmt.Sprintf("sum_squares %v n=%d", dt, n)
			s16, s32 := e.newPair16(dt, contig(n), func(int) float64 { return 3 * e.rng.NormFloat64() })
			dst := vspec{shape: []int{1}, strides: []int{1}, off: 5}
			d, d32 := e.newPair(backend.Float32, dst, mhFill(7)), e.newPair(backend.Float32, dst, mhFill(7))
			e.dev.SumSquares(d.dev, s16.dev)
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.SumSquares(v(d32), v(s32)) })
			// TestOpsSumSquares's tolerance against the CPU: 1e-6·max(1, |want|).
			w.add(e.check16(what, d, d32, tolScaled(1e-6)))
			// Against a float64 sum of the 16-bit values: within about half
			// a float32 ulp (the sum is compensated and the squares exact).
			h := make([]float32, s32.n)
			e.ref.Read(s32.ref.Buf, h)
			var want float64
			for _, x := range h[:n] {
				want += float64(x) * float64(x)
			}
			got := make([]float32, d.n)
			e.dev.Read(d.dev.Buf, got)
			rel := math.Abs(float64(got[5])-want) / max(want, 1e-30)
			worstRel = max(worstRel, rel)
			if rel > 6e-8 {
				t.Errorf("%s: %g, float64 sum %g (rel %.2e)", what, got[5], want, rel)
			}
		}
		t.Logf("sum_squares %-8v worst |err| vs the CPU %.2e (%.2f of the bound); worst relative error vs a float64 sum %.2e (bound 6e-8)",
			dt, w.abs, w.ofBound, worstRel)
	}
}

func TestMiscHalfSwiGLU(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		var wy, wa, wb halfWorst
		for _, n := range []int{1, 1000, 4099} {
			what := fmt.Sprintf("swiglu %v n=%d", dt, n)
			a16, a32 := e.newPair16(dt, contig(n), func(int) float64 { return 6 * e.rng.NormFloat64() })
			b16, b32 := e.newPair16(dt, contig(n), func(int) float64 { return 2 * e.rng.NormFloat64() })
			g16, g32 := e.newPair16(dt, contig(n), e.normal)
			y16, y32 := e.newPair16(dt, contig(n), mhFill(7))
			da16, da32 := e.newPair16(dt, contig(n), mhFill(7))
			db16, db32 := e.newPair16(dt, contig(n), mhFill(7))
			e.dev.SwiGLU(y16.dev, a16.dev, b16.dev)
			e.dev.SwiGLUBackward(da16.dev, db16.dev, a16.dev, b16.dev, g16.dev)
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.SwiGLU(v(y32), v(a32), v(b32))
				be.SwiGLUBackward(v(da32), v(db32), v(a32), v(b32), v(g32))
			})
			wy.add(e.check16(what+" y", y16, y32, tolOps))
			wa.add(e.check16(what+" da", da16, da32, tolOps))
			wb.add(e.check16(what+" db", db16, db32, tolOps))
		}
		t.Logf("swiglu %-8v worst ulp16 (fraction of the bound): y %.2f (%.2f), da %.2f (%.2f), db %.2f (%.2f)",
			dt, wy.ulps, wy.ofBound, wa.ulps, wa.ofBound, wb.ulps, wb.ofBound)
	}
}

// TestOpsSumSquaresSpecialValues: a NaN, ±Inf or 1e30 among 40000 values
// (so among several blocks) gives the CPU's sum of squares (NaN where it
// has NaN); on float16 and bfloat16 sources the float32 kernel's result on
// the widened values too (check16; 1e30 is +Inf in float16).
func TestOpsSumSquaresSpecialValues(t *testing.T) {
	e := newOpsEnv(t)
	for _, sp := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e30} {
		gen := func(i int) float64 {
			if i == 20000 {
				return sp
			}
			return e.rng.NormFloat64()
		}
		src := e.newPair(backend.Float32, contig(40000), gen)
		dst := e.newPair(backend.Float32, contig(1), func(int) float64 { return 7 })
		e.both(func(be backend.Backend, v func(pair) backend.View) { be.SumSquares(v(dst), v(src)) })
		e.compare(fmt.Sprintf("sum_squares with %g", sp), dst, 1e-6)
		for _, dt := range halfTypes {
			s16, s32 := e.newPair16(dt, contig(40000), gen)
			d, d32 := e.newPair(backend.Float32, contig(1), mhFill(7)), e.newPair(backend.Float32, contig(1), mhFill(7))
			e.dev.SumSquares(d.dev, s16.dev)
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.SumSquares(v(d32), v(s32)) })
			e.check16(fmt.Sprintf("sum_squares %v with %g", dt, sp), d, d32, tolScaled(1e-6))
		}
	}
}

// TestOpsFusedSchedules runs SumSquares (several blocks), SwiGLU and its
// backward on float32, float16 and bfloat16, and AdamW (float32), under
// the emulator's forward, reverse and random schedules: the results must
// agree bit for bit.
func TestOpsFusedSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(5, 6))
	in := make([]float32, 3*sumSqBlock/2)
	for i := range in {
		in[i] = float32(gen.NormFloat64())
	}
	gen = rand.New(rand.NewPCG(9, 10))
	const n16 = 3*sumSqBlock/2 + 5
	host := make([]float32, n16)
	for i := range host {
		host[i] = float32(3 * gen.NormFloat64())
	}
	var labels []string
	run := func() [][]uint32 {
		labels = labels[:0]
		var outs [][]uint32
		dev := e.dev
		v := contigView
		read := func(what string, b backend.Buffer, k int) {
			outs = append(outs, readBits(dev, b, k))
			labels = append(labels, what)
		}
		x := dev.Alloc(backend.Float32, len(in))
		dev.Write(x, in)
		s := dev.Alloc(backend.Float32, 2)
		dev.Write(s, []float32{0, 0})
		dev.SumSquares(v(s, 1, 1), v(x, 0, len(in)))
		read("sum_squares float32", s, 2)
		y, da, db := dev.Alloc(backend.Float32, 5000), dev.Alloc(backend.Float32, 5000), dev.Alloc(backend.Float32, 5000)
		dev.SwiGLU(v(y, 0, 5000), v(x, 0, 5000), v(x, 1, 5000))
		dev.SwiGLUBackward(v(da, 0, 5000), v(db, 0, 5000), v(x, 0, 5000), v(x, 1, 5000), v(x, 2, 5000))
		read("swiglu float32", y, 5000)
		read("swiglu_backward float32 da", da, 5000)
		read("swiglu_backward float32 db", db, 5000)
		w, m, mv := dev.Alloc(backend.Float32, 5000), dev.Alloc(backend.Float32, 5000), dev.Alloc(backend.Float32, 5000)
		dev.Copy(v(w, 0, 5000), v(x, 3, 5000))
		dev.Fill(v(m, 0, 5000), 0.01)
		dev.Fill(v(mv, 0, 5000), 0.02)
		dev.AdamW(v(w, 0, 5000), v(x, 4, 5000), v(m, 0, 5000), v(mv, 0, 5000),
			backend.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 3})
		read("adamw param", w, 5000)
		read("adamw m", m, 5000)
		read("adamw v", mv, 5000)
		for _, dt := range halfTypes {
			x := dev.Alloc(dt, n16)
			dev.Write(x, narrowAll(dt, host))
			s := dev.Alloc(backend.Float32, 2)
			dev.Write(s, []float32{0, 0})
			dev.SumSquares(v(s, 1, 1), v(x, 0, n16))
			read(fmt.Sprintf("sum_squares %v", dt), s, 2)
			y, da, db := dev.Alloc(dt, 5000), dev.Alloc(dt, 5000), dev.Alloc(dt, 5000)
			dev.SwiGLU(v(y, 0, 5000), v(x, 0, 5000), v(x, 1, 5000))
			dev.SwiGLUBackward(v(da, 0, 5000), v(db, 0, 5000), v(x, 0, 5000), v(x, 1, 5000), v(x, 2, 5000))
			read(fmt.Sprintf("swiglu %v", dt), y, 5000)
			read(fmt.Sprintf("swiglu_backward %v da", dt), da, 5000)
			read(fmt.Sprintf("swiglu_backward %v db", dt), db, 5000)
		}
		return outs
	}
	schedulesAgree(t, drv, run, func(i int) string { return labels[i] })
}

// TestOpsFusedRefused: float64 is refused with the backend's message
// (before any kernel); the dtype combinations outside the contract —
// mixed or int32 views, a 16-bit SumSquares dst, a 16-bit AdamW (float32
// only) — panic with a message naming the kernel and the dtypes.
func TestOpsFusedRefused(t *testing.T) {
	refusesFloat64(t, func(b *Backend, f64 backend.View) map[string]func() {
		return map[string]func(){
			kSwiGLU:     func() { b.SwiGLU(f64, f64, f64) },
			kSwiGLUBack: func() { b.SwiGLUBackward(f64, f64, f64, f64, f64) },
			kSumSquares: func() { b.SumSquares(f64, f64) },
			kAdamW:      func() { b.AdamW(f64, f64, f64, f64, backend.AdamWParams{Step: 1}) },
		}
	})
	e := newOpsEnv(t)
	h := e.newPair(backend.Float16, contig(2, 4), e.normal)
	bf := e.newPair(backend.BFloat16, contig(2, 4), e.normal)
	f := e.newPair(backend.Float32, contig(2, 4), e.normal)
	i2 := e.newPair(backend.Int32, contig(2), func(i int) float64 { return float64(i) })
	h1 := e.newPair(backend.Float16, contig(1), e.normal)
	f1 := e.newPair(backend.Float32, contig(1), e.normal)
	p := backend.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 1}
	for _, c := range []struct {
		name string
		fn   func()
		want []string // substrings of the panic message
	}{
		{"sum_squares f16 into f16", func() { e.dev.SumSquares(h1.dev, h.dev) }, []string{"sum_squares_f32", "float16"}},
		{"sum_squares bf16 into f16", func() { e.dev.SumSquares(h1.dev, bf.dev) }, []string{"sum_squares_f32", "float16"}},
		{"sum_squares int32", func() { e.dev.SumSquares(f1.dev, i2.dev) }, []string{"sum_squares_f32", "int32"}},
		{"swiglu mixed", func() { e.dev.SwiGLU(h.dev, h.dev, bf.dev) }, []string{"swiglu_f32", "float16", "bfloat16"}},
		{"swiglu f32←f16", func() { e.dev.SwiGLU(f.dev, h.dev, h.dev) }, []string{"swiglu_f32", "float32", "float16"}},
		{"swiglu_backward mixed", func() { e.dev.SwiGLUBackward(bf.dev, bf.dev, bf.dev, bf.dev, f.dev) }, []string{"swiglu_backward_f32", "bfloat16", "float32"}},
		{"adamw f16", func() { e.dev.AdamW(h.dev, h.dev, h.dev, h.dev, p) }, []string{"adamw_f32", "float16"}},
		{"adamw bf16 grad", func() { e.dev.AdamW(f.dev, bf.dev, f.dev, f.dev, p) }, []string{"adamw_f32", "bfloat16"}},
	} {
		wantPanic(t, c.name, c.fn, "metal: ", c.want...)
	}
}

// TestOpsFusedKernelNames checks that every kernel these ops launch is
// defined in the embedded sources.
func TestOpsFusedKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append([]string{kSwiGLU, kSwiGLUBack, kSumSquares, kAdamW}, fusedKernels...) {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}

// Emulator timings of the fused kernels (go test -bench OpsFused -run '^$'
// ./metal); they measure the emulation, not a GPU.
func BenchmarkOpsFused(b *testing.B) {
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
