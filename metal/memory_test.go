package metal

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/train"
)

// recBackends are fake-driver backends whose command buffers complete at
// once: a training step on one of them allocates, encodes and submits as
// on a GPU, without computing anything, so its memory and its command
// buffers can be counted at the sizes users train.
var recBackends = map[string]*Backend{}

func init() {
	small := newFakeDriver()
	small.name, small.workingSet = "metal-rec-1gb", 1<<30
	backend.Register(small.name, func() (backend.Backend, error) { return New(small), nil })
	for _, name := range []string{"metal-rec-small", "metal-rec-gpt-10m", "metal-rec-gpt-25m", "metal-rec-concurrent"} {
		d := newFakeDriver()
		d.name, d.holdCompletion = name, false
		d.keepless = name != "metal-rec-concurrent" // which keeps the dispatches to look at
		b := New(d)
		// Nothing computes here, and poisoning would touch (really
		// allocate) every page of the fake's gigabytes.
		b.pool.poison = false
		recBackends[name] = b
		backend.Register(name, func() (backend.Backend, error) { return b, nil })
	}
}

// TestTrainingMemory trains small, gpt-10m and gpt-25m for three steps on
// the recording driver (which completes each command buffer when it is
// committed, so nothing waits for a GPU) and checks each step: at most one
// command buffer per micro-batch plus one for the optimizer, one wait for
// the device (the loss read), no allocation hitting the pool's budget, and
// peak live device memory within 1.3× (checkpointed: 1.4×) of the analytic estimate
// (train.Config.MemoryNeeded: weights, gradients, AdamW moments and the
// activations one micro-batch keeps for its backward). Before memory was
// freed deterministically, gpt-10m peaked at 2.5× with 3–10 syncs a step
// and gpt-25m at 1.7× with ~190.
//
// Each model trains again with every block's activations checkpointed
// (checkpoint_activations true): the same checks against the estimate for
// that, and a peak below the plain run's by at least half of what the
// estimate says checkpointing saves.
func TestTrainingMemory(t *testing.T) {
	for _, name := range []string{"small", "gpt-10m", "gpt-25m"} {
		t.Run(name, func(t *testing.T) {
			if testing.Short() && name == "gpt-25m" {
				t.Skip("short")
			}
			var peaks, ests [2]float64
			for i, ck := range []bool{false, true} {
				cfg, err := train.LoadConfig(name)
				if err != nil {
					t.Fatal(err)
				}
				cfg.EvalEvery = 0
				if ck {
					cfg.Model.Checkpoint = gpt.AllBlocks()
				}
				peaks[i], ests[i] = trainingPeak(t, name, cfg)
			}
			t.Logf("%s: peak %.0f MB plain, %.0f MB checkpointed (%.0f MB less); estimated %.0f and %.0f MB (%.0f MB less)",
				name, peaks[0]/1e6, peaks[1]/1e6, (peaks[0]-peaks[1])/1e6, ests[0]/1e6, ests[1]/1e6, (ests[0]-ests[1])/1e6)
			if saved := peaks[0] - peaks[1]; saved < 0.5*(ests[0]-ests[1]) {
				t.Errorf("checkpointing saved %.0f MB of peak, want at least half of the estimated %.0f MB", saved/1e6, (ests[0]-ests[1])/1e6)
			}
		})
	}
}

// trainingPeak trains cfg three steps on the recording device of name,
// checks each step (TestTrainingMemory) and returns the last step's peak
// and the estimate.
func trainingPeak(t *testing.T, name string, cfg train.Config) (peak, est float64) {
	t.Helper()
	dev, err := forge.OpenDevice("metal-rec-" + name)
	if err != nil {
		t.Fatal(err)
	}
	b := recBackends["metal-rec-"+name]
	useDevice(t, dev)
	ck := cfg.Model.Checkpoint
	// The tensors of an earlier run on this device are unreachable:
	// return their memory before measuring.
	runtime.GC()
	dev.Recycle()
	// With checkpointing the temporaries (the logits' gradient, one
	// block's gradients during its recomputation) are a larger share of
	// a smaller total.
	over := 1.3
	if !ck.IsZero() {
		over = 1.4
	}
	err = forge.Try(func() {
		_, tr := newTrainer(cfg)
		dev.Sync()
		est = cfg.MemoryNeeded().Total()
		for step := range 3 {
			before, pb := b.StreamStats(), b.PoolStats()
			m := tr.Step()
			after, pa := b.StreamStats(), b.PoolStats()
			if m.Memory == nil || m.Memory.OptimizerLive != pa.Live || m.Memory.OptimizerPeak < pa.Live {
				t.Fatalf("checkpoint %v step %d: memory ledger %+v; the pool holds %d live at the end", ck, step+1, m.Memory, pa.Live)
			}
			cbs, syncs := after.CommandBuffers-before.CommandBuffers, after.Syncs-before.Syncs
			peak = float64(m.Memory.Peak())
			if cbs > int64(cfg.GradAccum)+1 || syncs != 1 || pa.Pressure != pb.Pressure || peak > over*est || peak < est {
				t.Errorf("checkpoint %v step %d: %d command buffers (want ≤ %d), %d syncs (want 1), %d budget hits (want 0), peak live %.0f MB = %.2f× the estimate %.0f MB (want 1–%.1f×: the estimate is a lower bound)",
					ck, step+1, cbs, cfg.GradAccum+1, syncs, pa.Pressure-pb.Pressure, peak/1e6, peak/est, est/1e6, over)
			}
			t.Logf("checkpoint %v step %d: %d command buffers, %d waits, %d syncs; peak live %.0f MB (estimate %.0f MB, %.2f×), %d budget hits, pool %.0f MB",
				ck, step+1, after.CommandBuffers-before.CommandBuffers, after.Waits-before.Waits, after.Syncs-before.Syncs,
				peak/1e6, est/1e6, peak/est, pa.Pressure-pb.Pressure, float64(pa.Bytes)/1e6)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return peak, est
}

// TestReuseWithinCommandBuffer: memory freed while the open command buffer
// still uses it serves the next allocation of its class at once (a later
// kernel in the same command buffer runs after the earlier ones), and a
// host write into such a block moves the tensor to other memory instead
// of overwriting what the queued kernels read or waiting for them.
func TestReuseWithinCommandBuffer(t *testing.T) {
	b, d := newTest(t)
	b.pool.poison = false // FORGE_METAL_POOL_POISON turns the reuse off
	const n = 64
	a := b.Alloc(backend.Int32, n)
	dst := b.Alloc(backend.Int32, n)
	b.fillU32(a, n, 1)
	b.copyBytes(dst, a, 4*n) // queued: reads a
	b.Free(a)
	c := b.Alloc(backend.Int32, n) // a's block, reused in the open command buffer
	if st := b.PoolStats(); st.Reused != 1 {
		t.Fatalf("reused %d blocks within the command buffer, want 1", st.Reused)
	}
	b.fillU32(c, n, 2)
	b.Free(c)
	w := b.Alloc(backend.Int32, n) // the same block again, then written by the host
	syncs := b.StreamStats().Syncs
	b.Write(w, []int32{3: 7, 63: 9})
	if b.StreamStats().Syncs != syncs {
		t.Errorf("a host write into memory reused within the command buffer waited for the device")
	}
	if c, _, _ := d.counts(); c != 0 {
		t.Errorf("%d command buffers committed; the write should not submit the queued kernels", c)
	}
	got, want := make([]int32, n), make([]int32, n)
	b.Read(dst, got)
	for i := range want {
		want[i] = 1
	}
	if !slices.Equal(got, want) {
		t.Errorf("the copy queued before the reuse read %v, want a's ones", got)
	}
	wv := make([]int32, n)
	b.Read(w, wv)
	if wv[3] != 7 || wv[63] != 9 || wv[0] != 0 {
		t.Errorf("the written tensor holds %v", wv[:4])
	}
}

// TestPoolBudgetFromWorkingSet: the pool's budget is nine tenths of the
// device's recommended working set, FORGE_METAL_POOL_MB overrides it, and
// a driver that does not know falls back to 4 GiB.
func TestPoolBudgetFromWorkingSet(t *testing.T) {
	d := newFakeDriver()
	d.workingSet = 10 << 30
	for _, c := range []struct {
		ws   int64
		env  string
		want int64
	}{
		{10 << 30, "", 10 << 30 / 10 * 9},
		{10 << 30, "512", 512 << 20},
		{10 << 30, "junk", 10 << 30 / 10 * 9},
		{0, "", 4 << 30},
	} {
		if got := poolBudget(c.ws, c.env); got != c.want {
			t.Errorf("working set %d, FORGE_METAL_POOL_MB=%q: budget %d, want %d", c.ws, c.env, got, c.want)
		}
	}
	b := New(d)
	if st := b.PoolStats(); st.Budget != 10<<30/10*9 || b.Memory().Budget != 10<<30 {
		t.Errorf("PoolStats.Budget = %d, Memory().Budget = %d", st.Budget, b.Memory().Budget)
	}
}

// TestConfigCheckUsesDeviceBudget: a config whose training memory exceeds
// the GPU's recommended working set is refused in one line naming the
// device budget (the system's memory would have let it through).
func TestConfigCheckUsesDeviceBudget(t *testing.T) {
	dev, err := forge.OpenDevice("metal-rec-1gb")
	if err != nil {
		t.Fatal(err)
	}
	useDevice(t, dev)
	t.Setenv("FORGE_MEMORY_AVAILABLE", "64000000000")
	cfg, err := train.LoadConfig("gpt-10m") // needs ~1.7 GB
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.CheckMemory()
	if err == nil || !strings.Contains(err.Error(), "metal-rec-1gb device's memory budget") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("CheckMemory on a 1 GiB GPU: %v", err)
	}
	t.Log(err)
	if c, _ := train.LoadConfig("tiny"); c.CheckMemory() != nil {
		t.Errorf("tiny refused on a 1 GiB GPU: %v", c.CheckMemory())
	}
}
