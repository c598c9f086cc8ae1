package metal

// The matmul2d path (kernels/matmul2d.metal, MSL 4.0 tensor ops) against
// the CPU backend, and the rule that picks it (ops_matmul.go).
//
// Accuracy: the device's float32 dst lies within γ(K+1)·Σ|terms| of the
// exact (float64) sum of the same terms, whatever the summation order (γ
// and the 16-bit bounds as in ops_half_test.go); so does the CPU's, so the
// two differ by at most twice that. 16-bit operands: halfMatMulCase's
// checks (float32 and 16-bit dst, the 16-bit dst exactly the float32 one
// rounded once).
//
// Selection: which kernel ran is read from the labels of the dispatches
// encoded into the current command buffer (a fresh one: Sync first, and
// nothing that reads before the labels are taken).

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/driver"
	"github.com/forgeml/forge/metal/emu"
)

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
					if want := kernel + "." + mmLayout(s.m, s.n, s.k, as.strides, bs.strides); len(labels) != 1 || labels[0] != want {
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
