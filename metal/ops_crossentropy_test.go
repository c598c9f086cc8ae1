package metal

// CrossEntropy and CrossEntropyBackward (ops_crossentropy.go) against the
// CPU backend: small and 50k vocabularies, ignored rows (and an ignored
// real class), large, confident and tied logits, special values, in-place
// gradients, an upstream gradient, more rows than one grid dimension
// holds; float16 and bfloat16 logits against the float32 kernels on the
// widened logits and the CPU (check16, ops_layout_test.go: loss and lse
// within opsTol·max(1, |want|), dlogits within ulp16/2 + 2e-5·|want| as
// the float32 gradients); bit-identical results across thread schedules;
// the refused dtype combinations.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

// ceRelErr compares gradients elementwise by relative error (the
// gradients are scale·p, far below the absolute tolerance of compare):
// |got − want| ≤ rtol·|want| + atol.
func (e *opsEnv) ceRelErr(what string, p pair, rtol, atol float64) float64 {
	e.t.Helper()
	got, want := e.read(p)
	worst := 0.0
	for i := range got {
		g, w := got[i], want[i]
		if math.IsNaN(w) || math.IsNaN(g) || math.IsInf(w, 0) || math.IsInf(g, 0) {
			if !(math.IsNaN(w) && math.IsNaN(g)) && g != w {
				e.t.Errorf("%s: element %d: got %v, want %v", what, i, g, w)
				return math.Inf(1)
			}
			continue
		}
		d := math.Abs(g - w)
		if w != 0 {
			worst = max(worst, d/math.Abs(w))
		}
		if d > rtol*math.Abs(w)+atol {
			e.t.Errorf("%s: element %d: got %.9g, want %.9g (rel %.2e)", what, i, g, w, d/math.Abs(w))
			return math.Inf(1)
		}
	}
	return worst
}

// ceLogits is the logits generator of the cross-entropy tests.
func (e *opsEnv) ceLogits(kind string, v int, targets []int32) func(i int) float64 {
	return func(i int) float64 {
		r, j := i/v, i%v
		switch kind {
		case "large": // big logits: lse ≈ 1e4
			return 1e4 + 3*e.rng.NormFloat64()
		case "ties": // many equal maxima across lanes and simdgroups
			return float64(e.rng.IntN(3))
		case "confident": // p_target ≈ 1 − 1e-6
			if targets[r] >= 0 && int(targets[r]) == j {
				return 20
			}
			return -e.rng.Float64()
		}
		return 3 * e.rng.NormFloat64()
	}
}

// ceIgnore is the ignore index of the cross-entropy tests.
const ceIgnore = -100

// ceSpecialRows are rows of 4 logits with NaN, +Inf, only −Inf, −Inf at
// the target (of the tests' targets 0, ignore, 2), −Inf elsewhere.
var ceSpecialRows = [][]float64{
	{1, math.NaN(), 2, 0}, {1, math.Inf(1), 2, 0},
	{math.Inf(-1), math.Inf(-1), math.Inf(-1), math.Inf(-1)},
	{math.Inf(-1), 3, 1, 0}, {2, math.Inf(-1), 1, 5},
}

// ceTargets draws n targets in [0, v), every fourth from the second
// ceIgnore (when n > 1).
func (e *opsEnv) ceTargets(n, v int) []int32 {
	tg := make([]int32, n)
	for i := range tg {
		tg[i] = int32(e.rng.IntN(v))
		if n > 1 && i%4 == 1 {
			tg[i] = ceIgnore
		}
	}
	return tg
}

// ceTargetPair holds the targets tg with ceIgnore replaced by ign (itself,
// or a real class to ignore).
func (e *opsEnv) ceTargetPair(tg []int32, ign int) pair {
	return e.newPair(backend.Int32, contig(len(tg)), func(i int) float64 {
		if tg[i] == ceIgnore {
			return float64(ign)
		}
		return float64(tg[i])
	})
}

// ceGradTol is the cross-entropy gradients' float32 tolerance (relative,
// as in TestOpsCrossEntropy).
func ceGradTol(w float64) float64 { return 2e-5*math.Abs(w) + 1e-30 }

func TestOpsCrossEntropy(t *testing.T) {
	e := newOpsEnv(t)
	const ignore = ceIgnore
	type ccase struct {
		n, v int
		kind string
	}
	cases := []ccase{
		{1, 1, "normal"}, {5, 7, "normal"}, {3, 1000, "normal"}, {2, 50257, "normal"},
		{300, 33, "normal"}, {70, 4099, "normal"}, {9, 500, "large"}, {9, 3000, "confident"},
		{40, 64, "confident"}, {3, 3000, "ties"}, {100, 40, "ties"},
	}
	var worstLoss, worstLSE, worstGrad float64
	for _, c := range cases {
		tg := e.ceTargets(c.n, c.v)
		for _, ign := range []int{ignore, int(tg[0])} { // ignore a real class too
			targets := e.ceTargetPair(tg, ign)
			logits := e.newPair(backend.Float32, contig(c.n, c.v), e.ceLogits(c.kind, c.v, tg))
			loss := e.newPair(backend.Float32, contig(c.n), func(int) float64 { return 3 })
			lse := e.newPair(backend.Float32, contig(c.n), func(int) float64 { return 3 })
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.CrossEntropy(v(loss), v(lse), v(logits), v(targets), ign)
			})
			what := fmt.Sprintf("cross_entropy %dx%d %s ignore %d", c.n, c.v, c.kind, ign)
			worstLoss = max(worstLoss, e.compare(what+" loss", loss, opsTol))
			worstLSE = max(worstLSE, e.compare(what+" lse", lse, opsTol))

			// The backward from the CPU's lse on both, so that only the
			// backward differs; then again in place (dlogits = logits).
			lh := make([]float32, c.n)
			e.ref.Read(lse.ref.Buf, lh)
			lse2 := e.newPair(backend.Float32, contig(c.n), func(i int) float64 { return float64(lh[i]) })
			scale := 0.7 / float64(c.n)
			dl := e.newPair(backend.Float32, contig(c.n, c.v), func(int) float64 { return 3 })
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.CrossEntropyBackward(v(dl), v(logits), v(lse2), v(targets), backend.View{}, ign, scale)
			})
			worstGrad = max(worstGrad, e.ceRelErr(what+" backward", dl, 2e-5, 1e-30))
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.CrossEntropyBackward(v(logits), v(logits), v(lse2), v(targets), backend.View{}, ign, scale)
			})
			worstGrad = max(worstGrad, e.ceRelErr(what+" backward in place", logits, 2e-5, 1e-30))
		}
	}
	t.Logf("cross_entropy maxdiff: loss %.2e, lse %.2e (scaled by max(1,|want|)); backward max relative error %.2e", worstLoss, worstLSE, worstGrad)

	// Special rows, each with its target ignored and not.
	for _, r := range ceSpecialRows {
		tg := []int32{0, ignore, 2}
		targets := e.ceTargetPair(tg, ignore)
		logits := e.newPair(backend.Float32, contig(3, 4), func(i int) float64 { return r[i%4] })
		loss := e.newPair(backend.Float32, contig(3), func(int) float64 { return 3 })
		lse := e.newPair(backend.Float32, contig(3), func(int) float64 { return 3 })
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.CrossEntropy(v(loss), v(lse), v(logits), v(targets), ignore)
		})
		e.compare(fmt.Sprintf("cross_entropy of %v loss", r), loss, opsTol)
		e.compare(fmt.Sprintf("cross_entropy of %v lse", r), lse, opsTol)
		dl := e.newPair(backend.Float32, contig(3, 4), func(int) float64 { return 3 })
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.CrossEntropyBackward(v(dl), v(logits), v(lse), v(targets), backend.View{}, ignore, 0.5)
		})
		e.compare(fmt.Sprintf("cross_entropy_backward of %v", r), dl, opsTol)
	}

	// An lse a little off the logits' own (both renormalise), an lse that
	// is finite for a row holding NaN (the unnormalised branch), a nil
	// loss, strided targets.
	tg := []int32{1, 0, 2, 1}
	targets := e.newPair(backend.Int32, vspec{shape: []int{2}, strides: []int{2}, off: 1}, func(i int) float64 { return float64(tg[i]) })
	logits := e.newPair(backend.Float32, contig(2, 3), e.normal)
	lseTrue := e.newPair(backend.Float32, contig(2), func(int) float64 { return 0 })
	e.ref.CrossEntropy(backend.View{}, lseTrue.ref, logits.ref, targets.ref, ignore)
	lh := make([]float32, 2)
	e.ref.Read(lseTrue.ref.Buf, lh)
	lse := e.newPair(backend.Float32, contig(2), func(i int) float64 { return float64(lh[i]) + []float64{0.5, -0.25}[i] })
	dl := e.newPair(backend.Float32, contig(2, 3), func(int) float64 { return 3 })
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.CrossEntropyBackward(v(dl), v(logits), v(lse), v(targets), backend.View{}, ignore, 0.25)
	})
	e.ceRelErr("cross_entropy_backward with an lse off by 0.5 and -0.25", dl, 2e-5, 1e-30)
	nanRow := e.newPair(backend.Float32, contig(2, 3), func(i int) float64 { return []float64{1, math.NaN(), -2, 0.5, 3, math.Inf(1)}[i] })
	lseFin := e.newPair(backend.Float32, contig(2), func(i int) float64 { return []float64{1.5, 4}[i] })
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.CrossEntropyBackward(v(dl), v(nanRow), v(lseFin), v(targets), backend.View{}, ignore, 0.25)
	})
	e.ceRelErr("cross_entropy_backward of NaN/+Inf rows with a finite lse", dl, 2e-5, 1e-30)
	lse3 := e.newPair(backend.Float32, contig(2), func(int) float64 { return 3 })
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.CrossEntropy(backend.View{}, v(lse3), v(logits), v(targets), ignore)
	})
	e.compare("cross_entropy without loss, strided targets", lse3, opsTol)
}

// TestOpsCrossEntropyManyRows covers more rows than one grid dimension
// holds, on float32 logits against the CPU and on float16 and bfloat16
// ones against the float32 kernels on the widened logits and the CPU
// (check16).
func TestOpsCrossEntropyManyRows(t *testing.T) {
	e := newOpsEnv(t)
	const rows = 65535 + 77
	targets := e.newPair(backend.Int32, contig(rows), func(i int) float64 { return float64(i % 3) })
	logits := e.newPair(backend.Float32, contig(rows, 3), e.normal)
	loss := e.newPair(backend.Float32, contig(rows), func(int) float64 { return 3 })
	lse := e.newPair(backend.Float32, contig(rows), func(int) float64 { return 3 })
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.CrossEntropy(v(loss), v(lse), v(logits), v(targets), 1)
	})
	e.compare("cross_entropy of many rows: loss", loss, opsTol)
	e.compare("cross_entropy of many rows: lse", lse, opsTol)
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.CrossEntropyBackward(v(logits), v(logits), v(lse), v(targets), backend.View{}, 1, 1)
	})
	e.compare("cross_entropy_backward of many rows", logits, opsTol)
	for _, dt := range halfTypes {
		what := fmt.Sprintf("cross_entropy %v of many rows", dt)
		lg16, lg32 := e.newPair16(dt, contig(rows, 3), e.normal)
		lossH, lseH := e.newPair(backend.Float32, contig(rows), mhFill(3)), e.newPair(backend.Float32, contig(rows), mhFill(3))
		loss32, lse32 := e.newPair(backend.Float32, contig(rows), mhFill(3)), e.newPair(backend.Float32, contig(rows), mhFill(3))
		e.dev.CrossEntropy(lossH.dev, lseH.dev, lg16.dev, targets.dev, 1)
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.CrossEntropy(v(loss32), v(lse32), v(lg32), v(targets), 1)
		})
		e.check16(what+": loss", lossH, loss32, tolOps)
		e.check16(what+": lse", lseH, lse32, tolOps)
		// The backward in place, from the CPU's lse on both.
		lh := make([]float32, rows)
		e.ref.Read(lse32.ref.Buf, lh)
		lse2 := e.newPair(backend.Float32, contig(rows), func(i int) float64 { return float64(lh[i]) })
		e.dev.CrossEntropyBackward(lg16.dev, lg16.dev, lse2.dev, targets.dev, backend.View{}, 1, 1)
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.CrossEntropyBackward(v(lg32), v(lg32), v(lse2), v(targets), backend.View{}, 1, 1)
		})
		e.check16(what+": backward", lg16, lg32, ceGradTol)
	}
}

// TestOpsCrossEntropyUpstream: the backward's upstream gradient g, read on
// the device, multiplies the scale as on the CPU, for every logits dtype's
// float32 g (16-bit dlogits checked by check16).
func TestOpsCrossEntropyUpstream(t *testing.T) {
	e := newOpsEnv(t)
	const n, v, ignore = 6, 37, 4
	tg := []int32{1, ignore, 36, 0, 5, 12}
	targets := e.ceTargetPair(tg, ignore)
	logits := e.newPair(backend.Float32, contig(n, v), e.normal)
	lse := e.newPair(backend.Float32, contig(n), func(int) float64 { return 0 })
	g := e.newPair(backend.Float32, contig(1), func(int) float64 { return -2.5 })
	dl := e.newPair(backend.Float32, contig(n, v), func(int) float64 { return 7 })
	e.both(func(be backend.Backend, p func(pair) backend.View) {
		be.CrossEntropy(backend.View{}, p(lse), p(logits), p(targets), ignore)
		be.CrossEntropyBackward(p(dl), p(logits), p(lse), p(targets), p(g), ignore, 1.0/5)
	})
	e.compare("cross_entropy_backward with g = −2.5", dl, opsTol)
	for _, dt := range halfTypes {
		lg16, lg32 := e.newPair16(dt, contig(n, v), e.normal)
		lse32 := e.newPair(backend.Float32, contig(n), mhFill(0))
		e.ref.CrossEntropy(backend.View{}, lse32.ref, lg32.ref, targets.ref, ignore)
		lh := make([]float32, n)
		e.ref.Read(lse32.ref.Buf, lh)
		lse2 := e.newPair(backend.Float32, contig(n), func(i int) float64 { return float64(lh[i]) })
		dl16, dl32 := e.newPair16(dt, contig(n, v), mhFill(7))
		e.dev.CrossEntropyBackward(dl16.dev, lg16.dev, lse2.dev, targets.dev, g.dev, ignore, 1.0/5)
		e.both(func(be backend.Backend, p func(pair) backend.View) {
			be.CrossEntropyBackward(p(dl32), p(lg32), p(lse2), p(targets), p(g), ignore, 1.0/5)
		})
		e.check16(fmt.Sprintf("cross_entropy_backward %v with g = −2.5", dt), dl16, dl32, ceGradTol)
	}
}

func TestMiscHalfCrossEntropy(t *testing.T) {
	e := newOpsEnv(t)
	const ignore = ceIgnore
	cases := []struct {
		n, v int
		kind string
	}{
		{1, 1, "normal"}, {5, 7, "normal"}, {3, 1000, "normal"}, {33, 257, "normal"},
		{9, 500, "large"}, {40, 64, "confident"}, {100, 40, "ties"},
	}
	for _, dt := range halfTypes {
		var loss, lse, grad halfWorst
		for _, c := range cases {
			tg := e.ceTargets(c.n, c.v)
			for _, ign := range []int{ignore, int(tg[0])} { // ignore a real class too
				what := fmt.Sprintf("cross_entropy %v %dx%d %s ignore %d", dt, c.n, c.v, c.kind, ign)
				targets := e.ceTargetPair(tg, ign)
				lg16, lg32 := e.newPair16(dt, contig(c.n, c.v), e.ceLogits(c.kind, c.v, tg))
				lossH, lseH := e.newPair(backend.Float32, contig(c.n), mhFill(3)), e.newPair(backend.Float32, contig(c.n), mhFill(3))
				loss32, lse32 := e.newPair(backend.Float32, contig(c.n), mhFill(3)), e.newPair(backend.Float32, contig(c.n), mhFill(3))
				e.dev.CrossEntropy(lossH.dev, lseH.dev, lg16.dev, targets.dev, ign)
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.CrossEntropy(v(loss32), v(lse32), v(lg32), v(targets), ign)
				})
				loss.add(e.check16(what+" loss", lossH, loss32, tolOps))
				lse.add(e.check16(what+" lse", lseH, lse32, tolOps))

				// The backward from the CPU's lse on both; then in place
				// (dlogits = logits).
				lh := make([]float32, c.n)
				e.ref.Read(lse32.ref.Buf, lh)
				lse2 := e.newPair(backend.Float32, contig(c.n), func(i int) float64 { return float64(lh[i]) })
				scale := 0.7 / float64(c.n)
				dl16, dl32 := e.newPair16(dt, contig(c.n, c.v), mhFill(3))
				e.dev.CrossEntropyBackward(dl16.dev, lg16.dev, lse2.dev, targets.dev, backend.View{}, ign, scale)
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.CrossEntropyBackward(v(dl32), v(lg32), v(lse2), v(targets), backend.View{}, ign, scale)
				})
				grad.add(e.check16(what+" backward", dl16, dl32, ceGradTol))
				e.dev.CrossEntropyBackward(lg16.dev, lg16.dev, lse2.dev, targets.dev, backend.View{}, ign, scale)
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.CrossEntropyBackward(v(lg32), v(lg32), v(lse2), v(targets), backend.View{}, ign, scale)
				})
				grad.add(e.check16(what+" backward in place", lg16, lg32, ceGradTol))
			}
		}
		// Special rows (ceSpecialRows), each with its target ignored and not.
		for _, r := range ceSpecialRows {
			what := fmt.Sprintf("cross_entropy %v of %v", dt, r)
			tg := []int32{0, ignore, 2}
			targets := e.ceTargetPair(tg, ignore)
			lg16, lg32 := e.newPair16(dt, contig(3, 4), func(i int) float64 { return r[i%4] })
			lossH, lseH := e.newPair(backend.Float32, contig(3), mhFill(3)), e.newPair(backend.Float32, contig(3), mhFill(3))
			loss32, lse32 := e.newPair(backend.Float32, contig(3), mhFill(3)), e.newPair(backend.Float32, contig(3), mhFill(3))
			e.dev.CrossEntropy(lossH.dev, lseH.dev, lg16.dev, targets.dev, ignore)
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.CrossEntropy(v(loss32), v(lse32), v(lg32), v(targets), ignore)
			})
			e.check16(what+" loss", lossH, loss32, tolOps)
			e.check16(what+" lse", lseH, lse32, tolOps)
			dl16, dl32 := e.newPair16(dt, contig(3, 4), mhFill(3))
			e.dev.CrossEntropyBackward(dl16.dev, lg16.dev, lseH.dev, targets.dev, backend.View{}, ignore, 0.5)
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.CrossEntropyBackward(v(dl32), v(lg32), v(lse32), v(targets), backend.View{}, ignore, 0.5)
			})
			e.check16(what+" backward", dl16, dl32, ceGradTol)
		}
		// Strided targets and no loss; a finite lse for rows holding NaN
		// and +Inf (the unnormalised branch).
		tgs := []int32{1, 0, 2, 1}
		targets := e.newPair(backend.Int32, vspec{shape: []int{2}, strides: []int{2}, off: 1}, func(i int) float64 { return float64(tgs[i]) })
		lg16, lg32 := e.newPair16(dt, contig(2, 3), e.normal)
		lseH, lse32 := e.newPair(backend.Float32, contig(2), mhFill(3)), e.newPair(backend.Float32, contig(2), mhFill(3))
		e.dev.CrossEntropy(backend.View{}, lseH.dev, lg16.dev, targets.dev, ignore)
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.CrossEntropy(backend.View{}, v(lse32), v(lg32), v(targets), ignore)
		})
		lse.add(e.check16(fmt.Sprintf("cross_entropy %v without loss, strided targets", dt), lseH, lse32, tolOps))
		nan16, nan32 := e.newPair16(dt, contig(2, 3), func(i int) float64 { return []float64{1, math.NaN(), -2, 0.5, 3, math.Inf(1)}[i] })
		lseFin := e.newPair(backend.Float32, contig(2), func(i int) float64 { return []float64{1.5, 4}[i] })
		dl16, dl32 := e.newPair16(dt, contig(2, 3), mhFill(3))
		e.dev.CrossEntropyBackward(dl16.dev, nan16.dev, lseFin.dev, targets.dev, backend.View{}, ignore, 0.25)
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.CrossEntropyBackward(v(dl32), v(nan32), v(lseFin), v(targets), backend.View{}, ignore, 0.25)
		})
		e.check16(fmt.Sprintf("cross_entropy_backward %v of NaN/+Inf rows with a finite lse", dt), dl16, dl32, ceGradTol)
		t.Logf("cross_entropy %-8v loss worst |err| %.2e (%.2f of the bound), lse %.2e (%.2f); dlogits worst %.2f ulp16 (%.2f of the bound)",
			dt, loss.abs, loss.ofBound, lse.abs, lse.ofBound, grad.ulps, grad.ofBound)
	}
}

// TestOpsCrossEntropySchedules runs the kernels of crossentropy.metal on
// float32, float16 and bfloat16 logits under the forward, reverse and
// random thread orders: the results must agree bit for bit.
func TestOpsCrossEntropySchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(5, 6))
	const n, v = 6, 2000
	logits := make([]float32, n*v)
	for i := range logits {
		logits[i] = float32(3 * gen.NormFloat64())
	}
	tgs := []int32{3, -1, 1999, 0, 7, 100}
	gen = rand.New(rand.NewPCG(9, 10))
	host := make([]float32, 6*1000)
	for i := range host {
		host[i] = float32(3 * gen.NormFloat64())
	}
	tg16 := make([]int32, 6)
	for i := range tg16 {
		tg16[i] = int32(gen.IntN(1000))
	}
	tg16[3] = -1 // ignored
	var labels []string
	run := func() [][]uint32 {
		labels = labels[:0]
		var outs [][]uint32
		dev := e.dev
		vw := contigView
		read := func(what string, b backend.Buffer, k int) {
			outs = append(outs, readBits(dev, b, k))
			labels = append(labels, what)
		}
		lb, tb := dev.Alloc(backend.Float32, n*v), dev.Alloc(backend.Int32, n)
		dev.Write(lb, logits)
		dev.Write(tb, tgs)
		loss, lse := dev.Alloc(backend.Float32, n), dev.Alloc(backend.Float32, n)
		dev.CrossEntropy(vw(loss, 0, n), vw(lse, 0, n), vw(lb, 0, n, v), vw(tb, 0, n), -1)
		read("cross_entropy float32 loss", loss, n)
		read("cross_entropy float32 lse", lse, n)
		dev.CrossEntropyBackward(vw(lb, 0, n, v), vw(lb, 0, n, v), vw(lse, 0, n), vw(tb, 0, n), backend.View{}, -1, 0.125)
		read("cross_entropy_backward float32 in place", lb, n*v)
		targets := dev.Alloc(backend.Int32, len(tg16))
		dev.Write(targets, tg16)
		for _, dt := range halfTypes {
			x := dev.Alloc(dt, len(host))
			dev.Write(x, narrowAll(dt, host))
			loss, lse, dl := dev.Alloc(backend.Float32, 6), dev.Alloc(backend.Float32, 6), dev.Alloc(dt, 6*1000)
			dev.CrossEntropy(vw(loss, 0, 6), vw(lse, 0, 6), vw(x, 0, 6, 1000), vw(targets, 0, 6), -1)
			dev.CrossEntropyBackward(vw(dl, 0, 6, 1000), vw(x, 0, 6, 1000), vw(lse, 0, 6), vw(targets, 0, 6), backend.View{}, -1, 0.125)
			read(fmt.Sprintf("cross_entropy %v loss", dt), loss, 6)
			read(fmt.Sprintf("cross_entropy %v lse", dt), lse, 6)
			read(fmt.Sprintf("cross_entropy_backward %v", dt), dl, 6*1000)
		}
		return outs
	}
	schedulesAgree(t, drv, run, func(i int) string { return labels[i] })
}

// TestOpsCrossEntropyRefused: float64 is refused with the backend's
// message (before any kernel), and the dtype combinations outside the
// contract panic with a message naming the kernel and the dtypes.
func TestOpsCrossEntropyRefused(t *testing.T) {
	refusesFloat64(t, func(b *Backend, f64 backend.View) map[string]func() {
		return map[string]func(){
			kCrossEntropy:     func() { b.CrossEntropy(f64, f64, f64, f64, -1) },
			kCrossEntropyBack: func() { b.CrossEntropyBackward(f64, f64, f64, f64, backend.View{}, -1, 1) },
		}
	})
	e := newOpsEnv(t)
	h := e.newPair(backend.Float16, contig(2, 4), e.normal)
	bf := e.newPair(backend.BFloat16, contig(2, 4), e.normal)
	f := e.newPair(backend.Float32, contig(2, 4), e.normal)
	h2 := e.newPair(backend.Float16, contig(2), e.normal)
	bf2 := e.newPair(backend.BFloat16, contig(2), e.normal)
	f2 := e.newPair(backend.Float32, contig(2), e.normal)
	i2 := e.newPair(backend.Int32, contig(2), func(i int) float64 { return float64(i) })
	for _, c := range []struct {
		name string
		fn   func()
		want []string // substrings of the panic message
	}{
		{"cross_entropy f16 loss", func() { e.dev.CrossEntropy(h2.dev, f2.dev, h.dev, i2.dev, -1) }, []string{"cross_entropy_f32", "float16"}},
		{"cross_entropy bf16 lse", func() { e.dev.CrossEntropy(f2.dev, bf2.dev, bf.dev, i2.dev, -1) }, []string{"cross_entropy_f32", "bfloat16"}},
		{"cross_entropy f16 targets", func() { e.dev.CrossEntropy(f2.dev, f2.dev, h.dev, h2.dev, -1) }, []string{"cross_entropy_f32", "float16"}},
		{"cross_entropy_backward bf16 dlogits of f16", func() { e.dev.CrossEntropyBackward(bf.dev, h.dev, f2.dev, i2.dev, backend.View{}, -1, 1) },
			[]string{"cross_entropy_backward_f32", "bfloat16", "float16"}},
		{"cross_entropy_backward f32 dlogits of bf16", func() { e.dev.CrossEntropyBackward(f.dev, bf.dev, f2.dev, i2.dev, backend.View{}, -1, 1) },
			[]string{"cross_entropy_backward_f32", "float32", "bfloat16"}},
		{"cross_entropy_backward f16 lse", func() { e.dev.CrossEntropyBackward(h.dev, h.dev, h2.dev, i2.dev, backend.View{}, -1, 1) },
			[]string{"cross_entropy_backward_f32", "float16"}},
	} {
		wantPanic(t, c.name, c.fn, "metal: ", c.want...)
	}
}

// TestOpsCrossEntropyKernelNames checks that every kernel these ops launch
// is defined in the embedded sources.
func TestOpsCrossEntropyKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range crossEntropyKernels {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}

// BenchmarkOpsCrossEntropy times the kernels on the emulator (go test
// -bench OpsCrossEntropy -run '^$' ./metal): it measures the emulation, not
// a GPU.
func BenchmarkOpsCrossEntropy(b *testing.B) {
	dev := opsBenchDevice(b)
	gen := rand.New(rand.NewPCG(7, 8))
	for _, sz := range [][2]int{{64, 4096}, {8, 50257}} {
		n, v := sz[0], sz[1]
		up := func(dt backend.DType, shape ...int) backend.View { return benchRandView(dev, gen, v, dt, shape...) }
		lg, tg := up(backend.Float32, n, v), up(backend.Int32, n)
		loss, lse, dl := up(backend.Float32, n), up(backend.Float32, n), up(backend.Float32, n, v)
		b.Run(fmt.Sprintf("cross_entropy_%dx%d", n, v), func(b *testing.B) {
			for b.Loop() {
				dev.CrossEntropy(loss, lse, lg, tg, -1)
				dev.Sync()
			}
		})
		b.Run(fmt.Sprintf("cross_entropy_backward_%dx%d", n, v), func(b *testing.B) {
			for b.Loop() {
				dev.CrossEntropyBackward(dl, lg, lse, tg, backend.View{}, -1, 1)
				dev.Sync()
			}
		})
	}
}
