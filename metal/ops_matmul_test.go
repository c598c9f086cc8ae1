package metal

// MatMul (ops_matmul.go) against the CPU backend: the simdgroup tiled
// kernels, the naive reference, split-K, and the matmul2d path (MSL 4.0
// tensor ops) with the rule that picks among them; every layout, odd sizes
// for every edge path, batches with broadcast, accumulation; float32,
// float16 and bfloat16 operands into float32 and 16-bit dsts; bit for bit
// across thread schedules.
//
// Accuracy. A float32 dst lies within γ(K+1)·Σ|terms| of the exact
// (float64) sum of the same terms, γ = n·2⁻²⁴/(1 − n·2⁻²⁴) for the n = K+1
// terms (c and the K products), whatever the summation order (tiles,
// split-K partials); so does the CPU's, so the two differ by at most twice
// that. Products of two 16-bit values are exact in float32, so a float32
// dst of 16-bit operands obeys the same bound; a 16-bit dst adds ulp16/2
// to it, and must be exactly the float32-dst kernel's result rounded once
// on the host (on the emulator; logged on a GPU). Split-K is checked
// exactly on integer-valued operands (every product and sum is exact in
// float32, so a chunk of K dropped, doubled or cut at the wrong place
// shows as a wrong integer) and within a tolerance on normal ones.
//
// Selection: which kernel ran is read from the labels of the dispatches
// encoded into the current command buffer (a fresh one: Sync first, and
// nothing that reads before the labels are taken).

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/driver"
	"github.com/forgeml/forge/metal/emu"
)

// mmOperand is a (batch…, rows, cols) operand, row-major or column-major
// in its last two dims (trans), with batch strides (0 = broadcast).
func mmOperand(batch []int, bstrides []int, rows, cols int, trans bool, off int) vspec {
	mat := rows * cols
	shape := append(append([]int(nil), batch...), rows, cols)
	strides := make([]int, 0, len(shape))
	for i := range batch {
		strides = append(strides, bstrides[i]*mat)
	}
	if trans {
		strides = append(strides, 1, rows)
	} else {
		strides = append(strides, cols, 1)
	}
	return vspec{shape: shape, strides: strides, off: off}
}

func TestOpsMatMul(t *testing.T) {
	e := newOpsEnv(t)
	type mcase struct {
		m, n, k int
	}
	sizes := []mcase{{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {64, 64, 64}, {32, 32, 16}, {8, 40, 3}, {1, 70, 33}, {45, 1, 20}}
	for _, naive := range []bool{false, true} {
		naiveMatMul.Store(naive)
		worst := 0.0
		for _, s := range sizes {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					for _, acc := range []bool{false, true} {
						a := e.newPair(backend.Float32, mmOperand(nil, nil, s.m, s.k, ta, 1), e.normal)
						b := e.newPair(backend.Float32, mmOperand(nil, nil, s.k, s.n, tb, 2), e.normal)
						c := e.newPair(backend.Float32, contig(s.m, s.n), e.normal)
						e.both(func(be backend.Backend, v func(pair) backend.View) { be.MatMul(v(c), v(a), v(b), acc) })
						worst = max(worst, e.compare(fmt.Sprintf("matmul naive=%v %dx%dx%d ta=%v tb=%v acc=%v", naive, s.m, s.n, s.k, ta, tb, acc), c, opsTol))
					}
				}
			}
		}
		// Batched: a (2, 3, M, K) with its batch dim 0 broadcast, b (3, K, N)
		// transposed, dst (2, 3, M, N); and a (5, M, K) @ b (K, N).
		for _, s := range []mcase{{7, 13, 5}, {33, 40, 17}} {
			for _, acc := range []bool{false, true} {
				a := e.newPair(backend.Float32, mmOperand([]int{2, 3}, []int{0, 1}, s.m, s.k, false, 0), e.normal)
				b := e.newPair(backend.Float32, mmOperand([]int{3}, []int{1}, s.k, s.n, true, 3), e.normal)
				c := e.newPair(backend.Float32, contig(2, 3, s.m, s.n), e.normal)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.MatMul(v(c), v(a), v(b), acc) })
				worst = max(worst, e.compare(fmt.Sprintf("matmul naive=%v batched bcast %v acc=%v", naive, s, acc), c, opsTol))

				a2 := e.newPair(backend.Float32, mmOperand([]int{5}, []int{1}, s.m, s.k, true, 0), e.normal)
				b2 := e.newPair(backend.Float32, contig(s.k, s.n), e.normal)
				c2 := e.newPair(backend.Float32, contig(5, s.m, s.n), e.normal)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.MatMul(v(c2), v(a2), v(b2), acc) })
				worst = max(worst, e.compare(fmt.Sprintf("matmul naive=%v batched x 2d %v acc=%v", naive, s, acc), c2, opsTol))
			}
		}
		// K = 0: dst = 0, or unchanged when accumulating.
		for _, acc := range []bool{false, true} {
			a := e.newPair(backend.Float32, contig(3, 0), e.normal)
			b := e.newPair(backend.Float32, contig(0, 4), e.normal)
			c := e.newPair(backend.Float32, contig(3, 4), e.normal)
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.MatMul(v(c), v(a), v(b), acc) })
			e.compare(fmt.Sprintf("matmul naive=%v K=0 acc=%v", naive, acc), c, 0)
		}
		t.Logf("matmul naive=%v maxdiff %.2e", naive, worst)
	}
	naiveMatMul.Store(false)
}

// mmExact returns, for dst (M, N) = a @ b (+ c), the float64 sums and the
// sums of magnitudes of their terms, from the float32 values the device
// holds (host slices of the whole buffers, views as specs).
func mmExact(m, n, k int, a, b []float32, as, bs vspec, c []float64) (exact, mag []float64) {
	as, bs = as.full(), bs.full()
	exact, mag = make([]float64, m*n), make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			s, g := 0.0, 0.0
			if c != nil {
				s, g = c[i*n+j], math.Abs(c[i*n+j])
			}
			for l := 0; l < k; l++ {
				x := float64(a[as.off+i*as.strides[0]+l*as.strides[1]]) * float64(b[bs.off+l*bs.strides[0]+j*bs.strides[1]])
				s += x
				g += math.Abs(x)
			}
			exact[i*n+j], mag[i*n+j] = s, g
		}
	}
	return exact, mag
}

// gamma is the float32 accumulation error factor of n terms: n·u/(1 − n·u).
func gamma(n int) float64 {
	u := math.Ldexp(1, -24)
	return float64(n) * u / (1 - float64(n)*u)
}

// TestHalfMatMul: float16 and bfloat16 operands (every layout, odd sizes
// for every edge path, accumulate, tiled and naive kernels, split-K),
// float32 and 16-bit dst. See the file's comment for the tolerances.
func TestHalfMatMul(t *testing.T) {
	e := newOpsEnv(t)
	type mcase struct{ m, n, k int }
	sizes := []mcase{{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {64, 64, 64}, {32, 32, 16}, {8, 40, 3}, {1, 70, 33}, {45, 1, 20}, {45, 70, 1000}}
	for _, dt := range halfTypes {
		for _, naive := range []bool{false, true} {
			naiveMatMul.Store(naive)
			worst32, worst16, worstCPU := 0.0, 0.0, 0.0
			for _, s := range sizes {
				if naive && s.k > 100 {
					continue
				}
				for _, ta := range []bool{false, true} {
					for _, tb := range []bool{false, true} {
						for _, acc := range []bool{false, true} {
							name := fmt.Sprintf("matmul %v naive=%v %dx%dx%d %s acc=%v", dt, naive, s.m, s.n, s.k, layoutTag(ta, tb), acc)
							w32, w16, wc := e.halfMatMulCase(name, dt, nil, nil, nil, s.m, s.n, s.k, ta, tb, acc)
							worst32, worst16, worstCPU = max(worst32, w32), max(worst16, w16), max(worstCPU, wc)
						}
					}
				}
			}
			// Batched with a broadcast batch dim and a transposed b; a
			// batch of a against one b.
			for _, s := range []mcase{{7, 13, 5}, {33, 40, 17}} {
				for _, acc := range []bool{false, true} {
					name := fmt.Sprintf("matmul %v naive=%v batched bcast %v acc=%v", dt, naive, s, acc)
					w32, w16, wc := e.halfMatMulCase(name, dt, []int{2, 3}, []int{0, 1}, []int{1}, s.m, s.n, s.k, false, true, acc)
					worst32, worst16, worstCPU = max(worst32, w32), max(worst16, w16), max(worstCPU, wc)
					name = fmt.Sprintf("matmul %v naive=%v batched x 2d %v acc=%v", dt, naive, s, acc)
					w32, w16, wc = e.halfMatMulCase(name, dt, []int{5}, []int{1}, nil, s.m, s.n, s.k, true, false, acc)
					worst32, worst16, worstCPU = max(worst32, w32), max(worst16, w16), max(worstCPU, wc)
				}
			}
			t.Logf("matmul %-9v naive=%v: float32 dst worst %.3f of the γ bound; 16-bit dst worst %.3f of its bound; worst vs the CPU's float32 %.2e",
				dt, naive, worst32, worst16, worstCPU)
		}
	}
	naiveMatMul.Store(false)
	// Mixed dtypes are refused.
	a16 := e.newPair(backend.Float16, contig(2, 2), e.normal)
	b16 := e.newPair(backend.BFloat16, contig(2, 2), e.normal)
	c32 := e.newPair(backend.Float32, contig(2, 2), e.normal)
	wantPanic(t, "float16 @ bfloat16", func() { e.dev.MatMul(c32.dev, a16.dev, b16.dev, false) }, "")
	wantPanic(t, "float16 @ float16 into bfloat16", func() { e.dev.MatMul(b16.dev, a16.dev, a16.dev, false) }, "")
}

// halfMatMulCase runs one product of 16-bit operands into a float32 dst
// and into a 16-bit dst (the same old values when accumulating) and checks
// both (see the file's comment). It returns the worst error of each as a
// fraction of its bound, and the worst difference from the CPU's float32
// product (scaled by max(1, |want|)).
func (e *opsEnv) halfMatMulCase(name string, dt backend.DType, batch, abs, bbs []int, m, n, k int, ta, tb, acc bool) (f32, f16, cpu float64) {
	e.t.Helper()
	var as, bs vspec
	nb := 1
	for _, d := range batch {
		nb *= d
	}
	if batch == nil {
		as, bs = mmOperand(nil, nil, m, k, ta, 1), mmOperand(nil, nil, k, n, tb, 2)
	} else {
		as = mmOperand(batch, abs, m, k, ta, 0)
		if bbs == nil { // one b for the whole batch
			bs = mmOperand(nil, nil, k, n, tb, 3)
		} else {
			bs = mmOperand(batch[len(batch)-len(bbs):], bbs, k, n, tb, 3)
		}
	}
	a16, a32 := e.newPair16(dt, as, e.normal)
	b16, b32 := e.newPair16(dt, bs, e.normal)
	cshape := append(append([]int(nil), batch...), m, n)
	c16, c32 := e.newPair16(dt, contig(cshape...), e.normal) // c32: c16's values widened
	cd32 := e.newPair(backend.Float32, contig(cshape...), func(i int) float64 { return 0 })
	// The float32 dst starts from the same (widened) values.
	old := make([]float32, c32.n)
	e.ref.Read(c32.ref.Buf, old)
	e.dev.Write(cd32.dev.Buf, old)
	e.dev.MatMul(cd32.dev, a16.dev, b16.dev, acc)
	e.dev.MatMul(c16.dev, a16.dev, b16.dev, acc)
	e.ref.MatMul(c32.ref, a32.ref, b32.ref, acc)

	got32 := make([]float32, cd32.n)
	e.dev.Read(cd32.dev.Buf, got32)
	got16 := make([]uint16, c16.n)
	e.dev.Read(c16.dev.Buf, got16)
	cpu32 := make([]float32, c32.n)
	e.ref.Read(c32.ref.Buf, cpu32)
	ah, bh := make([]float32, a32.n), make([]float32, b32.n)
	e.ref.Read(a32.ref.Buf, ah)
	e.ref.Read(b32.ref.Buf, bh)

	// Per batch: the exact sums from the matrices' host values.
	mat := m * n
	bad32, bad16, badCPU, badRound := false, false, false, false
	for z := 0; z < nb; z++ {
		// The batch offsets of a and b (row-major over batch dims).
		aoff, boff := as.off, bs.off
		rem := z
		for d := len(batch) - 1; d >= 0; d-- {
			i := rem % batch[d]
			rem /= batch[d]
			aoff += i * as.strides[d]
			if bbs != nil {
				bd := d - (len(batch) - len(bbs))
				if bd >= 0 {
					boff += i * bs.strides[bd]
				}
			}
		}
		am := vspec{shape: as.shape[len(as.shape)-2:], strides: as.strides[len(as.strides)-2:], off: aoff}
		bm := vspec{shape: bs.shape[len(bs.shape)-2:], strides: bs.strides[len(bs.strides)-2:], off: boff}
		var cold []float64
		if acc {
			cold = make([]float64, mat)
			for i := range cold {
				cold[i] = float64(old[z*mat+i])
			}
		}
		exact, mag := mmExact(m, n, k, ah, bh, am, bm, cold)
		terms := k
		if acc {
			terms++
		}
		g := gamma(terms)
		for i := 0; i < mat; i++ {
			x := exact[i]
			b32 := g * mag[i]
			if b32 == 0 {
				b32 = math.SmallestNonzeroFloat64
			}
			d32 := math.Abs(float64(got32[z*mat+i]) - x)
			f32 = max(f32, d32/b32)
			if d32 > b32 && !bad32 {
				e.t.Errorf("%s: float32 dst element %d: %.9g, exact %.9g, bound %.3g", name, z*mat+i, got32[z*mat+i], x, b32)
				bad32 = true
			}
			h := got16[z*mat+i]
			hv := float64(widen16(dt, h))
			b16 := ulp16(dt, max(math.Abs(hv), math.Abs(x)+b32))/2 + b32
			d16 := math.Abs(hv - x)
			f16 = max(f16, d16/b16)
			if d16 > b16 && !bad16 {
				e.t.Errorf("%s: %v dst element %d: %g (%#04x), exact %.9g, bound %.3g", name, dt, z*mat+i, hv, h, x, b16)
				bad16 = true
			}
			// Rounded once: the 16-bit dst is the float32 dst's value
			// rounded — required on the emulator, logged on a GPU (check16's
			// rule: its compiler may contract the two instances apart).
			if want := narrow16(dt, got32[z*mat+i]); h != want && !badRound {
				msg := fmt.Sprintf("%s: %v dst element %d: %#04x, the float32 dst %.9g rounds to %#04x", name, dt, z*mat+i, h, got32[z*mat+i], want)
				if e.onEmulator() {
					e.t.Error(msg)
				} else {
					e.t.Log(msg)
				}
				badRound = true
			}
			w := float64(cpu32[z*mat+i])
			dc := math.Abs(float64(got32[z*mat+i])-w) / max(1, math.Abs(w))
			cpu = max(cpu, dc)
			if dc > splitTol(k) && !badCPU {
				e.t.Errorf("%s: float32 dst element %d: %.9g, the CPU's float32 product %.9g", name, z*mat+i, got32[z*mat+i], w)
				badCPU = true
			}
		}
	}
	return f32, f16, cpu
}

// splitShapes are products the rule splits on the emulator (no GPUCores:
// G = 64 threadgroups): square and odd tiles, K a multiple of the chunk
// step or not, a partial last chunk.
var splitShapes = []struct{ m, n, k int }{
	{64, 64, 4096}, // 4 tiles, 16 splits of 256
	{45, 70, 1000}, // 6 tiles, edges on M and N, K not a multiple of 16
	{8, 200, 3000}, // one tile row
	{33, 17, 777},  // 2 tiles, 1-element edges
	{32, 32, 300},  // one aligned tile, short K: 2 splits
}

func TestSplitKPlan(t *testing.T) {
	b := opsDevice(t)
	for _, s := range splitShapes {
		n, chunk := b.splitKPlan(s.m, s.n, s.k)
		if n < 2 || chunk%mmBK != 0 || (n-1)*chunk >= s.k || n*chunk < s.k {
			t.Errorf("%d×%d×%d: %d splits of %d: want ≥ 2 non-empty chunks of whole %d-steps covering K", s.m, s.n, s.k, n, chunk, mmBK)
		}
		if n > mmSplitMax || chunk < mmSplitMinSteps*mmBK {
			t.Errorf("%d×%d×%d: %d splits of %d break the caps", s.m, s.n, s.k, n, chunk)
		}
	}
	// Not split: enough tiles already, short K, square-ish small, and
	// the switch.
	for _, s := range []struct{ m, n, k int }{{256, 256, 4096}, {64, 64, 100}, {64, 64, 127}, {200, 200, 256}} {
		if n, _ := b.splitKPlan(s.m, s.n, s.k); n != 1 {
			t.Errorf("%d×%d×%d: %d splits, want none", s.m, s.n, s.k, n)
		}
	}
	noSplitK.Store(true)
	if n, _ := b.splitKPlan(64, 64, 4096); n != 1 {
		t.Errorf("nosplit: %d splits", n)
	}
	noSplitK.Store(false)
}

func TestMatMulSplitK(t *testing.T) {
	e := newOpsEnv(t)
	ints := func(int) float64 { return float64(e.rng.IntN(7) - 3) } // |Σ| ≤ 9K < 2^24: exact
	for _, s := range splitShapes {
		for _, ta := range []bool{true, false} {
			for _, tb := range []bool{false, true} {
				for _, acc := range []bool{false, true} {
					name := fmt.Sprintf("%dx%dx%d %s acc=%v", s.m, s.n, s.k, layoutTag(ta, tb), acc)
					// Integer operands: exact on both devices.
					a := e.newPair(backend.Float32, mmOperand(nil, nil, s.m, s.k, ta, 3), ints)
					b := e.newPair(backend.Float32, mmOperand(nil, nil, s.k, s.n, tb, 1), ints)
					c := e.newPair(backend.Float32, contig(s.m, s.n), ints)
					before := e.dev.StreamStats().Dispatches
					e.both(func(be backend.Backend, v func(pair) backend.View) { be.MatMul(v(c), v(a), v(b), acc) })
					if d := e.dev.StreamStats().Dispatches - before; d != 2 {
						t.Errorf("%s: %d dispatches, want 2 (split + reduce)", name, d)
					}
					e.compare(name+" integers", c, 0)
					// Normal operands: float32 rounding, in another order
					// than the CPU's.
					a = e.newPair(backend.Float32, mmOperand(nil, nil, s.m, s.k, ta, 3), e.normal)
					b = e.newPair(backend.Float32, mmOperand(nil, nil, s.k, s.n, tb, 1), e.normal)
					c = e.newPair(backend.Float32, contig(s.m, s.n), e.normal)
					e.both(func(be backend.Backend, v func(pair) backend.View) { be.MatMul(v(c), v(a), v(b), acc) })
					e.compare(name+" normal", c, splitTol(s.k))
				}
			}
		}
	}
}

// splitTol is the tolerance of a float32 product over K normal terms
// against the CPU's: |got − want| ≤ tol·max(1, |want|). The rounding
// errors of two float32 sums of K terms of size ~1 differ by about
// √K·2⁻²⁴·√K; 8× that.
func splitTol(k int) float64 { return max(opsTol, 8*float64(k)*math.Pow(2, -24)) }

// TestMatMulSplitKSchedules requires split-K results (partials and the
// ordered reduction) to be the same bits under every thread schedule.
func TestMatMulSplitKSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	const m, n, k = 45, 70, 1000
	rng := rand.New(rand.NewPCG(5, 6))
	host := make([]float32, m*k+k*n+m*n)
	for i := range host {
		host[i] = float32(rng.NormFloat64())
	}
	run := func() []float32 {
		buf := e.dev.Alloc(backend.Float32, len(host))
		e.dev.Write(buf, host)
		a := backend.View{Buf: buf, Shape: []int{m, k}, Strides: []int{1, m}} // xᵀ: column-major
		bm := backend.View{Buf: buf, Offset: m * k, Shape: []int{k, n}, Strides: []int{n, 1}}
		c := backend.View{Buf: buf, Offset: m*k + k*n, Shape: []int{m, n}, Strides: []int{n, 1}}
		e.dev.MatMul(c, a, bm, true)
		out := make([]float32, len(host))
		e.dev.Read(buf, out)
		return out[m*k+k*n:]
	}
	drv.SetSchedule(emu.Forward, 0)
	want := run()
	for _, s := range []struct {
		s    emu.Schedule
		seed uint64
	}{{emu.Reverse, 0}, {emu.Random, 1}, {emu.Random, 2}} {
		drv.SetSchedule(s.s, s.seed)
		got := run()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("schedule %v seed %d: element %d: %g, forward gives %g", s.s, s.seed, i, got[i], want[i])
			}
		}
	}
}

// withMatMul runs f with the tiled path set to path and split-K on or off,
// restoring both after.
func withMatMul(path int32, split bool, f func()) {
	prevPath, prevSplit := matmulPath.Load(), noSplitK.Load()
	matmulPath.Store(path)
	noSplitK.Store(!split)
	defer func() {
		matmulPath.Store(prevPath)
		noSplitK.Store(prevSplit)
	}()
	f()
}

// encoded runs f, which must only encode, on a fresh command buffer and
// returns the labels of the kernels it encoded.
func encoded(b *Backend, f func()) []string {
	b.Sync()
	f()
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.stream.labels...)
}

// setEmuTensorOps sets an emulator backend's tensor-ops level for the
// rest of the test, whatever FORGE_EMU_TENSOR_OPS says (no-op on a GPU).
func setEmuTensorOps(t *testing.T, b *Backend, l driver.TensorOpsLevel) {
	if d, ok := b.Driver().(*emu.Driver); ok {
		prev := d.TensorOps()
		d.SetTensorOps(l)
		t.Cleanup(func() { d.SetTensorOps(prev) })
	}
}

// needTensorOps skips a test of the matmul2d kernels on a device that does
// not run them (the emulator always does here).
func needTensorOps(t *testing.T, b *Backend) {
	t.Helper()
	setEmuTensorOps(t, b, driver.TensorOpsAccelerated)
	if lvl := b.tensorOpsLevel(); lvl < driver.TensorOpsSupported {
		t.Skipf("%s runs no tensor ops (level %v)", b.Device(), lvl)
	}
	if err := b.m2Failed.Load(); err != nil {
		t.Fatalf("matmul2d is off on %s: %v", b.Device(), *err)
	}
}

// f32MatMulCase runs one float32 product (optionally batched: batch dims,
// a's batch strides in matrices, b's for its trailing batch dims or nil
// for one b) on both devices and checks the device against the exact sum
// (γ(K+1)·Σ|terms|) and the CPU (twice that). It returns the labels of the
// device's kernels and its worst error as a fraction of the bound.
func (e *opsEnv) f32MatMulCase(name string, batch, abs, bbs []int, m, n, k int, ta, tb, acc bool) ([]string, float64) {
	e.t.Helper()
	var as, bs vspec
	if batch == nil {
		as, bs = mmOperand(nil, nil, m, k, ta, 1), mmOperand(nil, nil, k, n, tb, 2)
	} else {
		as = mmOperand(batch, abs, m, k, ta, 0)
		if bbs == nil {
			bs = mmOperand(nil, nil, k, n, tb, 3)
		} else {
			bs = mmOperand(batch[len(batch)-len(bbs):], bbs, k, n, tb, 3)
		}
	}
	return e.f32MatMulViews(name, batch, bbs, as, bs, m, n, k, acc)
}

// f32MatMulViews is f32MatMulCase for given operand views (as, bs: their
// last two dims the matrices).
func (e *opsEnv) f32MatMulViews(name string, batch, bbs []int, as, bs vspec, m, n, k int, acc bool) ([]string, float64) {
	e.t.Helper()
	as, bs = as.full(), bs.full()
	a := e.newPair(backend.Float32, as, e.normal)
	b := e.newPair(backend.Float32, bs, e.normal)
	cshape := append(append([]int(nil), batch...), m, n)
	c := e.newPair(backend.Float32, contig(cshape...), e.normal)
	old := make([]float32, c.n)
	e.ref.Read(c.ref.Buf, old)
	labels := encoded(e.dev, func() { e.dev.MatMul(c.dev, a.dev, b.dev, acc) })
	// The CPU takes row- and column-major operands only: for others the
	// device is checked against the exact sums alone.
	cpuOK := opsPanic(func() { e.ref.MatMul(c.ref, a.ref, b.ref, acc) }) == "no panic"
	got, cpu := make([]float32, c.n), make([]float32, c.n)
	e.dev.Read(c.dev.Buf, got)
	e.ref.Read(c.ref.Buf, cpu)
	ah, bh := make([]float32, a.n), make([]float32, b.n)
	e.ref.Read(a.ref.Buf, ah)
	e.ref.Read(b.ref.Buf, bh)
	nb := 1
	for _, d := range batch {
		nb *= d
	}
	mat, worst := m*n, 0.0
	for z := 0; z < nb; z++ {
		aoff, boff, rem := as.off, bs.off, z
		for d := len(batch) - 1; d >= 0; d-- {
			i := rem % batch[d]
			rem /= batch[d]
			aoff += i * as.strides[d]
			if bd := d - (len(batch) - len(bbs)); bbs != nil && bd >= 0 {
				boff += i * bs.strides[bd]
			}
		}
		am := vspec{shape: as.shape[len(as.shape)-2:], strides: as.strides[len(as.strides)-2:], off: aoff}
		bm := vspec{shape: bs.shape[len(bs.shape)-2:], strides: bs.strides[len(bs.strides)-2:], off: boff}
		var cold []float64
		terms := k
		if acc {
			terms++
			cold = make([]float64, mat)
			for i := range cold {
				cold[i] = float64(old[z*mat+i])
			}
		}
		exact, mag := mmExact(m, n, k, ah, bh, am, bm, cold)
		for i := 0; i < mat; i++ {
			bound := gamma(terms) * mag[i]
			g, w := float64(got[z*mat+i]), float64(cpu[z*mat+i])
			d := math.Abs(g - exact[i])
			if bound > 0 {
				worst = max(worst, d/bound)
			}
			if !(d <= bound) || cpuOK && !(math.Abs(g-w) <= 2*bound) {
				e.t.Fatalf("%s (%v): element %d: %.9g, exact %.9g (bound %.3g), the CPU's %.9g", name, labels, z*mat+i, g, exact[i], bound, w)
			}
		}
	}
	return labels, worst
}

// mmLayout is the layout tag MatMul gives an m × k a and k × n b of
// strides as and bs (a dimension of size 1 says nothing: see aTrans, bTrans
// in MatMul).
func mmLayout(m, n, k int, as, bs []int) string {
	aTrans := k > 1 && as[1] != 1 && (m == 1 || as[0] == 1)
	bTrans := n > 1 && bs[1] != 1 && (k == 1 || bs[0] == 1)
	return layoutTag(aTrans, bTrans)
}

// mm2dShapes are not tile multiples (64 × 32 blocks) except where said.
var mm2dShapes = []struct{ m, n, k int }{
	{1, 1, 1},
	{7, 13, 5},
	{64, 32, 16}, // one whole block
	{70, 45, 33}, // edges on both sides
	{1, 70, 300}, // a vector times a matrix
	{130, 9, 77},
	{128, 96, 64}, // whole blocks only
	{45, 70, 1000},
}

func TestMatMul2DFloat32(t *testing.T) {
	e := newOpsEnv(t)
	needTensorOps(t, e.dev)
	withMatMul(pathMatMul2D, false, func() { e.f32MatMulSweep("matmul2d_f32") })
}

// TestMatMulSimdgroupPath runs the sweeps of this file on the simdgroup
// kernels (FORGE_METAL_MATMUL=simdgroup), which the other tests of the
// package no longer reach on the emulator for the layouts matmul2d takes.
func TestMatMulSimdgroupPath(t *testing.T) {
	e := newOpsEnv(t)
	withMatMul(pathSimdgroup, false, func() {
		e.f32MatMulSweep("matmul_f32")
		e.halfMatMulSweep("matmul")
	})
}

// f32MatMulSweep checks float32 products of every layout, edge and batch
// case, each run by the kernel named kernel (+ its layout tag).
func (e *opsEnv) f32MatMulSweep(kernel string) {
	t := e.t
	worst := 0.0
	for _, s := range mm2dShapes {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, acc := range []bool{false, true} {
					name := fmt.Sprintf("%s %dx%dx%d %s acc=%v", kernel, s.m, s.n, s.k, layoutTag(ta, tb), acc)
					labels, w := e.f32MatMulCase(name, nil, nil, nil, s.m, s.n, s.k, ta, tb, acc)
					as, bs := mmOperand(nil, nil, s.m, s.k, ta, 0), mmOperand(nil, nil, s.k, s.n, tb, 0)
					lay := mmLayout(s.m, s.n, s.k, as.strides, bs.strides)
					want := kernel + "." + lay
					if kernel == "matmul_f32" { // the tiled kernels: the table's tile where whole tiles fit
						kn := matmulByDType[backend.Float32][1]
						li := slices.Index(layoutTags[:], lay)
						if kn.table[li].fits(s.m, s.n, s.k) {
							want = kn.tableL[li]
						}
					}
					if len(labels) != 1 || labels[0] != want {
						t.Errorf("%s: kernels %v, want [%s]", name, labels, want)
					}
					worst = max(worst, w)
				}
			}
		}
	}
	// Batched: a broadcast batch dim and b per trailing batch; a batch of a
	// against one b. One dispatch each (the batches are grid z).
	for _, s := range []struct{ m, n, k int }{{7, 13, 5}, {70, 40, 17}} {
		for _, acc := range []bool{false, true} {
			name := fmt.Sprintf("%s batched bcast %v acc=%v", kernel, s, acc)
			labels, w := e.f32MatMulCase(name, []int{2, 3}, []int{0, 1}, []int{1}, s.m, s.n, s.k, false, true, acc)
			if len(labels) != 1 || labels[0] != kernel+".nt" {
				t.Errorf("%s: kernels %v, want one %s.nt", name, labels, kernel)
			}
			worst = max(worst, w)
			name = fmt.Sprintf("%s batched x 2d %v acc=%v", kernel, s, acc)
			labels, w = e.f32MatMulCase(name, []int{5}, []int{1}, nil, s.m, s.n, s.k, true, false, acc)
			if len(labels) != 1 || labels[0] != kernel+".tn" {
				t.Errorf("%s: kernels %v, want one %s.tn", name, labels, kernel)
			}
			worst = max(worst, w)
		}
	}
	t.Logf("%s: worst error %.3f of the γ(K+1)·Σ|terms| bound", kernel, worst)
}

func TestMatMul2DHalf(t *testing.T) {
	e := newOpsEnv(t)
	needTensorOps(t, e.dev)
	withMatMul(pathMatMul2D, false, func() { e.halfMatMulSweep("matmul2d") })
}

// halfMatMulSweep checks float16 and bfloat16 products (float32 and 16-bit
// dst) of every layout and edge case and a batch, and that the kernels
// named prefix_<dtype>[_f32] ran.
func (e *opsEnv) halfMatMulSweep(prefix string) {
	t := e.t
	for _, dt := range halfTypes {
		worst32, worst16, worstCPU := 0.0, 0.0, 0.0
		for _, s := range mm2dShapes {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					for _, acc := range []bool{false, true} {
						name := fmt.Sprintf("%s %v %dx%dx%d %s acc=%v", prefix, dt, s.m, s.n, s.k, layoutTag(ta, tb), acc)
						w32, w16, wc := e.halfMatMulCase(name, dt, nil, nil, nil, s.m, s.n, s.k, ta, tb, acc)
						worst32, worst16, worstCPU = max(worst32, w32), max(worst16, w16), max(worstCPU, wc)
					}
				}
			}
		}
		for _, acc := range []bool{false, true} {
			name := fmt.Sprintf("%s %v batched acc=%v", prefix, dt, acc)
			w32, w16, wc := e.halfMatMulCase(name, dt, []int{2, 3}, []int{0, 1}, []int{1}, 33, 40, 17, false, true, acc)
			worst32, worst16, worstCPU = max(worst32, w32), max(worst16, w16), max(worstCPU, wc)
		}
		t.Logf("%s %-9v: float32 dst worst %.3f of the γ bound; 16-bit dst worst %.3f of its bound; worst vs the CPU's float32 %.2e",
			prefix, dt, worst32, worst16, worstCPU)
	}
	// The kernels that ran: float32 and 16-bit dst.
	for _, dt := range halfTypes {
		a, _ := e.newPair16(dt, mmOperand(nil, nil, 9, 7, true, 0), e.normal)
		b, _ := e.newPair16(dt, mmOperand(nil, nil, 7, 5, false, 0), e.normal)
		c16, _ := e.newPair16(dt, contig(9, 5), e.normal)
		c32 := e.newPair(backend.Float32, contig(9, 5), e.normal)
		got := encoded(e.dev, func() {
			e.dev.MatMul(c32.dev, a.dev, b.dev, true)
			e.dev.MatMul(c16.dev, a.dev, b.dev, false)
		})
		tag := dtypeTag(dt)
		if want := []string{prefix + "_" + tag + "_f32.tn", prefix + "_" + tag + ".tn"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%v: kernels %v, want %v", dt, got, want)
		}
	}
}

// TestMatMul2DSelection: which kernel a product runs — matmul2d where the
// path, the device and the layout allow it, the simdgroup kernels (or the
// naive one, or split-K) otherwise — and that the fallbacks are right.
func TestMatMul2DSelection(t *testing.T) {
	e := newOpsEnv(t)
	needTensorOps(t, e.dev)
	_, isEmu := e.dev.Driver().(*emu.Driver)
	type sel struct {
		name    string
		path    int32
		split   bool
		naive   bool
		emuOff  bool
		a, b    vspec // a is 20 × 30, b is 30 × 40 unless the case says
		m, n, k int
		want    []string
	}
	row := func(r, c int) vspec { return mmOperand(nil, nil, r, c, false, 0) }
	col := func(r, c int) vspec { return mmOperand(nil, nil, r, c, true, 0) }
	auto := "matmul_f32.nn" // float32: auto never takes matmul2d (the level table below checks 16-bit)
	cases := []sel{
		{name: "forced, nn", path: pathMatMul2D, a: row(20, 30), b: row(30, 40), want: []string{"matmul2d_f32.nn"}},
		{name: "forced, tt", path: pathMatMul2D, a: col(20, 30), b: col(30, 40), want: []string{"matmul2d_f32.tt"}},
		{name: "auto", path: pathAuto, a: row(20, 30), b: row(30, 40), want: []string{auto}},
		{name: "simdgroup", path: pathSimdgroup, a: row(20, 30), b: row(30, 40), want: []string{"matmul_f32.nn"}},
		{name: "naive", path: pathMatMul2D, naive: true, a: row(20, 30), b: row(30, 40), want: []string{"matmul_naive_f32"}},
		// a with a non-unit stride along both axes (every other column).
		{name: "strided a", path: pathMatMul2D, a: vspec{shape: []int{20, 30}, strides: []int{60, 2}},
			b: row(30, 40), want: []string{"matmul_f32.nn"}},
		// b's rows overlap (row stride 10 < 40 columns).
		{name: "overlapping b", path: pathMatMul2D, a: row(20, 30), b: vspec{shape: []int{30, 40}, strides: []int{10, 1}},
			want: []string{"matmul_f32.nn"}},
		// a column-major b whose columns are padded: still a tensor.
		{name: "padded col-major b", path: pathMatMul2D, a: row(20, 30), b: vspec{shape: []int{30, 40}, strides: []int{1, 33}},
			want: []string{"matmul2d_f32.nt"}},
		// One row: its row stride is never used (0 here).
		{name: "one row, stride 0", path: pathMatMul2D, a: vspec{shape: []int{1, 30}, strides: []int{0, 1}}, b: row(30, 40),
			m: 1, want: []string{"matmul2d_f32.nn"}},
		// A split-K shape keeps the simdgroup split kernels.
		{name: "split-K", path: pathMatMul2D, split: true, a: col(32, 4096), b: row(4096, 32), m: 32, n: 32, k: 4096,
			want: []string{"matmul_splitk_f32.tn", "matmul_reduce_f32"}},
	}
	if isEmu {
		cases = append(cases, sel{name: "emulator without tensor ops", path: pathMatMul2D, emuOff: true,
			a: row(20, 30), b: row(30, 40), want: []string{"matmul_f32.nn"}})
	}
	for _, c := range cases {
		m, n, k := 20, 40, 30
		if c.m != 0 {
			m = c.m
		}
		if c.n != 0 {
			n, k = c.n, c.k
		}
		naiveMatMul.Store(c.naive)
		if c.emuOff {
			e.dev.Driver().(*emu.Driver).SetTensorOps(driver.TensorOpsNone)
		}
		withMatMul(c.path, c.split, func() {
			for _, acc := range []bool{false, true} {
				labels, _ := e.f32MatMulViews(c.name, nil, nil, c.a, c.b, m, n, k, acc)
				if fmt.Sprint(labels) != fmt.Sprint(c.want) {
					t.Errorf("%s acc=%v: kernels %v, want %v", c.name, acc, labels, c.want)
				}
			}
		})
		naiveMatMul.Store(false)
		if c.emuOff {
			e.dev.Driver().(*emu.Driver).SetTensorOps(driver.TensorOpsAccelerated)
		}
	}
	// The level the backend sees is the driver's.
	if isEmu {
		if got := e.dev.tensorOpsLevel(); got != driver.TensorOpsAccelerated {
			t.Errorf("emulator: tensor ops %v, want accelerated", got)
		}
	}
	if got := New(newFakeDriver()).tensorOpsLevel(); got != driver.TensorOpsNone {
		t.Errorf("a driver without TensorOps: %v, want none", got)
	}
	// A driver that reports its level: the path decides with it.
	for _, c := range []struct {
		lvl                        driver.TensorOpsLevel
		auto, forced, simdgroupOff bool
	}{
		{driver.TensorOpsNone, false, false, false},
		{driver.TensorOpsSupported, false, true, false},
		{driver.TensorOpsAccelerated, true, true, false},
	} {
		b := New(&levelDriver{newFakeDriver(), c.lvl})
		for path, want := range map[int32]bool{pathAuto: c.auto, pathMatMul2D: c.forced, pathSimdgroup: c.simdgroupOff} {
			withMatMul(path, true, func() {
				if got := b.matmul2dOn(backend.Float16); got != want {
					t.Errorf("level %v, path %d: matmul2d %v for float16, want %v", c.lvl, path, got, want)
				}
				// float32 products go to matmul2d only when forced.
				if got, want32 := b.matmul2dOn(backend.Float32), want && path != pathAuto; got != want32 {
					t.Errorf("level %v, path %d: matmul2d %v for float32, want %v", c.lvl, path, got, want32)
				}
			})
		}
	}
}

// levelDriver is a fake driver that reports a tensor-ops level.
type levelDriver struct {
	*fakeDriver
	lvl driver.TensorOpsLevel
}

func (d *levelDriver) TensorOps() driver.TensorOpsLevel { return d.lvl }

// TestMatMul2DCompileFailure: a backend whose matmul2d pipeline does not
// compile (here: an emulator without matmul2d.metal) runs the simdgroup
// kernel, right, and does not try matmul2d again.
func TestMatMul2DCompileFailure(t *testing.T) {
	drv, err := emu.Open(map[string]string{"matmul.metal": kernels.Sources()["matmul.metal"]}, emu.Options{})
	if err != nil {
		skipUnavailable(t, err)
	}
	defer drv.Close()
	e := newOpsEnv(t)
	e.dev = New(drv)
	setEmuTensorOps(t, e.dev, driver.TensorOpsAccelerated)
	withMatMul(pathMatMul2D, false, func() {
		for i := 0; i < 2; i++ {
			labels, _ := e.f32MatMulCase("no matmul2d.metal", nil, nil, nil, 33, 20, 17, true, false, true)
			if fmt.Sprint(labels) != "[matmul_f32.tn]" {
				t.Errorf("call %d: kernels %v, want [matmul_f32.tn]", i, labels)
			}
			got := e.dev.m2Failed.Load()
			if got == nil || !strings.Contains(fmt.Sprint(*got), "matmul2d_f32") {
				t.Fatalf("call %d: matmul2d failure recorded as %v", i, got)
			}
		}
		if n := e.dev.Pipelines(); n != 2 { // the failed matmul2d_f32 and matmul_f32
			t.Errorf("%d pipelines, want 2 (matmul2d tried once)", n)
		}
	})
}

// TestMatMul2DSchedules: the matmul2d kernels, and the simdgroup ones
// they replace, give the same bits under every emulator thread schedule
// (edges, accumulate, batch, 16-bit).
func TestMatMul2DSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	setEmuTensorOps(t, e.dev, driver.TensorOpsAccelerated)
	gen := rand.New(rand.NewPCG(9, 10))
	host := make([]float32, 3*70*45+3*45*33+3*70*33)
	for i := range host {
		host[i] = float32(gen.NormFloat64())
	}
	var labels []string
	var path int32
	run := func() [][]uint32 {
		var outs [][]uint32
		labels = labels[:0]
		for _, dt := range []backend.DType{backend.Float32, backend.Float16, backend.BFloat16} {
			buf := e.dev.Alloc(dt, len(host))
			if dt == backend.Float32 {
				e.dev.Write(buf, host)
			} else {
				bits := make([]uint16, len(host))
				for i, x := range host {
					bits[i] = narrow16(dt, x)
				}
				e.dev.Write(buf, bits)
			}
			const m, n, k = 70, 33, 45
			a := backend.View{Buf: buf, Shape: []int{3, m, k}, Strides: []int{m * k, 1, m}} // column-major matrices
			bm := backend.View{Buf: buf, Offset: 3 * m * k, Shape: []int{k, n}, Strides: []int{n, 1}}
			c := backend.View{Buf: buf, Offset: 3*m*k + k*n, Shape: []int{3, m, n}, Strides: []int{m * n, n, 1}}
			withMatMul(path, false, func() {
				labels = append(labels, encoded(e.dev, func() { e.dev.MatMul(c, a, bm, true) })...)
			})
			if dt == backend.Float32 {
				h := make([]float32, len(host))
				e.dev.Read(buf, h)
				o := make([]uint32, len(h))
				for i, v := range h {
					o[i] = math.Float32bits(v)
				}
				outs = append(outs, o)
			} else {
				h := make([]uint16, len(host))
				e.dev.Read(buf, h)
				o := make([]uint32, len(h))
				for i, v := range h {
					o[i] = uint32(v)
				}
				outs = append(outs, o)
			}
			e.dev.Free(buf)
		}
		return outs
	}
	for _, c := range []struct {
		path int32
		want string
	}{
		{pathMatMul2D, "[matmul2d_f32.tn matmul2d_f16.tn matmul2d_bf16.tn]"},
		{pathSimdgroup, "[matmul_f32.tn matmul_f16.tn matmul_bf16.tn]"},
	} {
		path = c.path
		schedulesAgree(t, drv, run, func(i int) string { return []string{"float32", "float16", "bfloat16"}[i] + " " + c.want })
		if fmt.Sprint(labels) != c.want {
			t.Errorf("kernels %v, want %s", labels, c.want)
		}
	}
}

// TestOpsMatMulSchedules: the matmul kernels (threadgroup tiles, barriers,
// simdgroup_matrix fragments) give the same bits under every emulator
// thread schedule: a float32 product of transposed operands accumulated
// onto a copied dst, and float16 and bfloat16 products (tiles with edges,
// split-K, accumulate) into float32 and 16-bit dsts.
func TestOpsMatMulSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(3, 4))
	in := make([]float32, 33*17+17*65+33*65)
	for i := range in {
		in[i] = float32(gen.NormFloat64())
	}
	gen = rand.New(rand.NewPCG(7, 8))
	host := make([]float32, 45*1000+1000*70+45*70)
	for i := range host {
		host[i] = float32(gen.NormFloat64())
	}
	var labels []string
	run := func() [][]uint32 {
		labels = labels[:0]
		var outs [][]uint32
		read := func(what string, b []uint32) {
			outs = append(outs, b)
			labels = append(labels, what)
		}
		v := contigView
		x := e.dev.Alloc(backend.Float32, len(in))
		e.dev.Write(x, in)
		c := e.dev.Alloc(backend.Float32, 33*65)
		e.dev.Copy(v(c, 0, 33*65), v(x, 33*17+17*65, 33*65))
		a := backend.View{Buf: x, Shape: []int{33, 17}, Strides: []int{1, 33}}
		bm := backend.View{Buf: x, Offset: 33 * 17, Shape: []int{17, 65}, Strides: []int{1, 17}}
		e.dev.MatMul(v(c, 0, 33, 65), a, bm, true)
		read("float32 33x65x17", readBits(e.dev, c, 33*65))
		for _, dt := range halfTypes {
			buf := e.dev.Alloc(dt, len(host))
			bits := narrowAll(dt, host)
			e.dev.Write(buf, bits)
			for _, shape := range []struct{ m, n, k int }{{33, 65, 17}, {45, 70, 1000}} {
				m, n, k := shape.m, shape.n, shape.k
				a := backend.View{Buf: buf, Shape: []int{m, k}, Strides: []int{1, m}}
				bm := backend.View{Buf: buf, Offset: m * k, Shape: []int{k, n}, Strides: []int{n, 1}}
				c16 := backend.View{Buf: buf, Offset: m*k + k*n, Shape: []int{m, n}, Strides: []int{n, 1}}
				c32b := e.dev.Alloc(backend.Float32, m*n)
				c32 := backend.View{Buf: c32b, Shape: []int{m, n}, Strides: []int{n, 1}}
				e.dev.Copy(c32, c16)
				e.dev.MatMul(c32, a, bm, true)
				e.dev.MatMul(c16, a, bm, true)
				c16bits := readBits(e.dev, buf, len(host))[m*k+k*n:][:m*n]
				read(fmt.Sprintf("%v %dx%dx%d float32 dst", dt, m, n, k), readBits(e.dev, c32b, m*n))
				read(fmt.Sprintf("%v %dx%dx%d 16-bit dst", dt, m, n, k), c16bits)
				e.dev.Write(buf, bits) // restore c for the next run
			}
		}
		return outs
	}
	schedulesAgree(t, drv, run, func(i int) string { return labels[i] })
}

// TestOpsMatMulRefused: float64 is refused with the backend's message
// (before any kernel), and a 16-bit product into the other 16-bit dtype
// panics naming the kernel (TestHalfMatMul covers mixed operands).
func TestOpsMatMulRefused(t *testing.T) {
	refusesFloat64(t, func(b *Backend, f64 backend.View) map[string]func() {
		return map[string]func(){
			kMatMul: func() { b.MatMul(f64, f64, f64, false) },
		}
	})
	e := newOpsEnv(t)
	h := e.newPair(backend.Float16, contig(4), e.normal)
	bf := e.newPair(backend.BFloat16, contig(4), e.normal)
	wantPanic(t, "matmul f16 into bf16", func() { e.dev.MatMul(bf.dev, h.dev, h.dev, false) }, "metal: ")
}

// TestOpsMatMulKernelNames checks that every kernel MatMul launches is
// defined in the embedded sources, for every operand and dst dtype.
func TestOpsMatMulKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	names := []string{kMatMul, kMatMulNaive}
	for _, dt := range floatTypes {
		for _, out := range []backend.DType{backend.Float32, dt} {
			kn := matmulKernels(dt, out)
			names = append(names, kn.tiled, kn.naive, kn.splitK, kn.reduce)
			names = append(names, kn.tableK[:]...)
		}
	}
	for _, k := range names {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}

// Emulator timings of the matmul kernels, tiled and naive, by operand and
// dst dtype (go test -bench OpsMatMul -run '^$' ./metal). On the emulator
// they measure the emulation, not a GPU.
func BenchmarkOpsMatMul(b *testing.B) {
	dev := opsBenchDevice(b)
	up := func(shape ...int) backend.View { return benchView(dev, 0, shape...) }
	for _, s := range []int{64, 128, 256} {
		a, bm, c := up(s, s), up(s, s), up(s, s)
		for _, naive := range []bool{false, true} {
			name := fmt.Sprintf("matmul_%d_tiled", s)
			if naive {
				name = fmt.Sprintf("matmul_%d_naive", s)
			}
			b.Run(name, func(b *testing.B) {
				naiveMatMul.Store(naive)
				defer naiveMatMul.Store(false)
				for b.Loop() {
					dev.MatMul(c, a, bm, false)
					dev.Sync()
				}
			})
		}
	}
	for _, s := range []int{128, 256} {
		for _, dt := range floatTypes {
			outs := []backend.DType{backend.Float32, dt}
			if dt == backend.Float32 {
				outs = outs[:1]
			}
			for _, out := range outs {
				up := func(dt backend.DType) backend.View {
					buf := dev.Alloc(dt, s*s)
					if dt == backend.Float32 {
						h := make([]float32, s*s)
						for i := range h {
							h[i] = float32(i%17) / 17
						}
						dev.Write(buf, h)
					} else {
						h := make([]uint16, s*s)
						for i := range h {
							h[i] = narrow16(dt, float32(i%17)/17)
						}
						dev.Write(buf, h)
					}
					return backend.View{Buf: buf, Shape: []int{s, s}, Strides: []int{s, 1}}
				}
				a, bm, c := up(dt), up(dt), up(out)
				b.Run(fmt.Sprintf("%d_%v_to_%v", s, dt, out), func(b *testing.B) {
					for b.Loop() {
						dev.MatMul(c, a, bm, false)
						dev.Sync()
					}
				})
			}
		}
	}
}
