package metal

import (
	"math"
	"slices"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/metal/emu"
)

// TestKernelWrites: the signature table says which buffers a kernel may
// write, read from the MSL declarations (checked here by hand against
// kernels/fused.metal and optim.metal), and knows no kernel it was not
// given.
func TestKernelWrites(t *testing.T) {
	for _, tc := range []struct {
		kernel string
		want   []bool
	}{
		{"adamw_f32", []bool{true, false, true, true, false, false}},
		{"grad_clip_f32", []bool{true, false, false}},
		{"sum_squares_f32", []bool{true, false, false}},
	} {
		if got := kernelWrites(tc.kernel); !slices.Equal(got, tc.want) {
			t.Errorf("%s writes %v, want %v", tc.kernel, got, tc.want)
		}
	}
	if w := kernelWrites("copy_bytes"); w != nil {
		t.Errorf("an unknown kernel has writes %v; want nil (it writes every buffer)", w)
	}
	for _, tc := range []struct {
		typ  string
		want bool
	}{{"device const float*", true}, {"const device half*", true}, {"device float*", false}, {"device float* const", false}, {"device Params&", false}} {
		if got := isConst(tc.typ); got != tc.want {
			t.Errorf("isConst(%q) = %v", tc.typ, got)
		}
	}
}

// TestConcurrentRegionBarriers: inside Concurrent the stream opens a
// region at the first dispatch, keeps independent dispatches in one
// stretch, puts a barrier before one that reads what an earlier one wrote,
// ends the region at Concurrent(false) and at a commit (opening a new one
// in the next command buffer), and encodes nothing concurrently otherwise.
func TestConcurrentRegionBarriers(t *testing.T) {
	b, d := newTest(t)
	const n = 16
	x, y, z, w := b.Alloc(backend.Int32, n), b.Alloc(backend.Int32, n), b.Alloc(backend.Int32, n), b.Alloc(backend.Int32, n)
	b.fillU32(x, n, 1) // before the region
	b.Concurrent(true)
	b.fillU32(y, n, 2)
	b.fillU32(z, n, 3)
	b.copyBytes(w, y, 4*n) // reads y: barrier
	b.fillU32(x, n, 4)     // independent of the stretch since the barrier
	b.Concurrent(false)
	b.fillU32(y, n, 5)
	b.Concurrent(true)
	b.fillU32(z, n, 6)
	b.Sync() // commits: the region ends with it
	b.fillU32(w, n, 7)
	b.Concurrent(false)
	b.Sync()
	if len(d.cbs) != 2 {
		t.Fatalf("%d command buffers, want 2", len(d.cbs))
	}
	if got, want := d.cbs[0].group, []int{0, 1, 1, 2, 2, 0, 3}; !slices.Equal(got, want) {
		t.Errorf("first command buffer's groups %v, want %v", got, want)
	}
	if got, want := d.cbs[1].group, []int{1}; !slices.Equal(got, want) {
		t.Errorf("second command buffer's groups %v, want %v", got, want)
	}
	if st := b.RegionStats(); st != (RegionStats{Regions: 3, Dispatches: 6, Barriers: 1}) {
		t.Errorf("region stats %+v", st)
	}
	got := make([]int32, n)
	b.Read(w, got)
	if got[0] != 7 {
		t.Errorf("w[0] = %d, want 7", got[0])
	}
}

// TestConcurrentKernelsMatchSerial runs, inside one concurrent region on
// the emulator, kernels that depend on each other (y = x + x, then z = y·y),
// two-pass sums of squares of several tensors into one buffer, and
// clipped AdamW updates of several parameters, under the forward, reverse
// and random schedules (which order a region's dispatches between
// barriers as encoded, reversed, shuffled): every result must equal,
// bit for bit, the same kernels run serially. Without the barriers and
// the deferred second passes the reversed order reads values not yet
// written, and the emulator refuses two dispatches on one tensor in one
// stretch.
func TestConcurrentKernelsMatchSerial(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	dev := e.dev
	const big = 2*sumSqBlock + 77 // three blocks: two passes
	sizes := []int{big, 300, big + 5, 64}
	host := make([][]float32, len(sizes))
	for i, n := range sizes {
		host[i] = make([]float32, n)
		for j := range host[i] {
			host[i][j] = float32(math.Sin(float64(7*i+j)) * 0.3)
		}
	}
	upload := func(xs []float32) backend.Buffer {
		b := dev.Alloc(backend.Float32, len(xs))
		dev.Write(b, xs)
		return b
	}
	run := func(concurrent bool) (out [][]uint32) {
		dev.Concurrent(concurrent)
		x := upload(host[0][:1000])
		y, z := dev.Alloc(backend.Float32, 1000), dev.Alloc(backend.Float32, 1000)
		dev.Binary(backend.Add, contigView(y, 0, 1000), contigView(x, 0, 1000), contigView(x, 0, 1000))
		dev.Binary(backend.Mul, contigView(z, 0, 1000), contigView(y, 0, 1000), contigView(y, 0, 1000))
		sums := dev.Alloc(backend.Float32, len(sizes))
		grads := make([]backend.Buffer, len(sizes))
		for i, h := range host {
			grads[i] = upload(h)
			dev.SumSquares(contigView(sums, i, 1), contigView(grads[i], 0, len(h)))
		}
		dev.Concurrent(false)
		state := dev.Alloc(backend.Float32, backend.ClipStateLen)
		dev.GradClip(contigView(state, 0, backend.ClipStateLen), contigView(sums, 0, len(sizes)), 0.5, 1)
		dev.Concurrent(concurrent)
		params := make([]backend.Buffer, len(sizes))
		for i, h := range host {
			n := len(h)
			params[i] = upload(h)
			m, v := upload(h), upload(h)
			dev.AdamWClipped(contigView(params[i], 0, n), contigView(grads[i], 0, n), contigView(m, 0, n), contigView(v, 0, n),
				contigView(state, 0, backend.ClipStateLen), backend.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 3})
		}
		dev.Concurrent(false)
		out = append(out, readBits(dev, z, 1000), readBits(dev, sums, len(sizes)), readBits(dev, state, backend.ClipStateLen))
		for i, p := range params {
			out = append(out, readBits(dev, p, len(host[i])))
		}
		return out
	}
	drv.SetSchedule(emu.Forward, 0)
	want := run(false)
	before := dev.RegionStats()
	for _, s := range []struct {
		s    emu.Schedule
		seed uint64
	}{{emu.Forward, 0}, {emu.Reverse, 0}, {emu.Random, 3}, {emu.Random, 4}} {
		drv.SetSchedule(s.s, s.seed)
		got := run(true)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("%v: result %d differs from the serial run", s.s, i)
			}
		}
	}
	st := dev.RegionStats()
	// Per run: the first region (add, mul: one barrier; the sums: their
	// second passes deferred, behind one more) and the AdamW region.
	if r := st.Regions - before.Regions; r != 8 {
		t.Errorf("%d regions in 4 runs, want 8", r)
	}
	if b := st.Barriers - before.Barriers; b != 8 {
		t.Errorf("%d barriers in 4 runs, want 8 (after the add, before the deferred second passes)", b)
	}
	if d := st.Deferred - before.Deferred; d != 8 {
		t.Errorf("%d deferred dispatches in 4 runs, want 8 (two tensors of several blocks)", d)
	}
}

// TestOptimizerRunsConcurrently trains one step of gpt-10m on the
// recording driver: the optimizer's AdamW updates, one per parameter,
// run in one concurrent stretch with no barrier among them, and the
// clip's sums of squares in one region whose second passes follow after
// a single barrier.
func TestOptimizerRunsConcurrently(t *testing.T) {
	cfg, err := train.LoadConfig("gpt-10m")
	if err != nil {
		t.Fatal(err)
	}
	cfg.EvalEvery, cfg.GradAccum = 0, 1
	if cfg.GradClip <= 0 {
		t.Fatalf("gpt-10m does not clip (grad_clip %v): the test needs the clip's sums", cfg.GradClip)
	}
	dev, err := forge.OpenDevice("metal-rec-concurrent")
	if err != nil {
		t.Fatal(err)
	}
	useDevice(t, dev)
	b := recBackends["metal-rec-concurrent"]
	d := b.drv.(*fakeDriver)
	err = forge.Try(func() {
		m, tr := newTrainer(cfg)
		dev.Sync()
		from := len(d.cbs)
		tr.Step()
		var adam, sq1, sq2 []int // the groups of each kind of dispatch
		for _, cb := range d.cbs[from:] {
			for i, ds := range cb.dispatches {
				switch k := ds.Pipeline.Key().Kernel; {
				case k == kAdamW:
					adam = append(adam, cb.group[i])
				case ds.Label == sumSquaresTotalLabel:
					sq2 = append(sq2, cb.group[i])
				case k == kSumSquares:
					sq1 = append(sq1, cb.group[i])
				}
			}
		}
		if len(adam) != len(m.Params()) {
			t.Fatalf("%d AdamW dispatches for %d parameters", len(adam), len(m.Params()))
		}
		if adam[0] == 0 || slices.Max(adam) != adam[0] || slices.Min(adam) != adam[0] {
			t.Errorf("AdamW groups %v: want one concurrent stretch", adam)
		}
		if len(sq1) != len(m.Params()) || len(sq2) == 0 {
			t.Fatalf("%d first and %d second passes of the sums of squares", len(sq1), len(sq2))
		}
		if sq1[0] == 0 || slices.Max(sq1) != sq1[0] || slices.Min(sq1) != sq1[0] || slices.Min(sq2) != sq1[0]+1 || slices.Max(sq2) != sq1[0]+1 {
			t.Errorf("sums of squares: first passes in groups %v, second passes in %v; want one stretch each, the second right after the first", sq1, sq2)
		}
		t.Logf("%d parameters: AdamW in group %d; %d first passes in group %d, %d second passes in group %d; %+v",
			len(adam), adam[0], len(sq1), sq1[0], len(sq2), sq2[0], b.RegionStats())
	})
	if err != nil {
		t.Fatal(err)
	}
}
