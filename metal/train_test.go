package metal

// Training on the emulated Metal device against the CPU: the same tiny GPT
// from the same initial weights, trained on the same batches by the
// unchanged forge/train Trainer, must give the same losses; and every step
// must be one command buffer and one wait (one command buffer per
// micro-batch with gradient accumulation, still one wait). The
// device-side clip's own test is in ops_optim_test.go.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/profile"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/metal/emu"
)

// seqBatches serves batches of a seeded random token stream: x a window,
// y the window shifted by one — the same batches for every device.
type seqBatches struct {
	rng          *rand.Rand
	vocab, b, tt int
}

func (s *seqBatches) Next() (x, y []int32) {
	x = make([]int32, s.b*s.tt)
	y = make([]int32, s.b*s.tt)
	for r := range s.b {
		w := make([]int32, s.tt+1)
		for i := range w {
			// A skewed distribution, so the model has something to learn.
			w[i] = int32(min(s.rng.IntN(s.vocab), s.rng.IntN(s.vocab)))
		}
		copy(x[r*s.tt:], w[:s.tt])
		copy(y[r*s.tt:], w[1:])
	}
	return x, y
}

// trainConfig is a tiny GPT run: vocab 64, context 16, d 32, 2 layers, 2
// query heads over 1 KV head (GQA), RMSNorm, RoPE, SwiGLU, tied
// embeddings; batch 16 (K = B·T = 256 tokens: the weight gradients take
// the split-K path), constant lr 1e-2 and clipping at 0.5, so that the
// clip is active and five steps move the loss.
func trainConfig(accum int) train.Config {
	c := train.DefaultConfig()
	c.Name = "metal-test"
	c.Model = gpt.Config{
		Vocab: 64, Context: 16, Dim: 32, Layers: 2, Heads: 2, KVHeads: 1,
		Norm: "rmsnorm", MLP: "swiglu", Position: "rope", RoPETheta: 10000, NormEps: 1e-5, InitStd: 0.02,
	}
	c.Batch, c.GradAccum = 16, accum
	c.LR, c.Warmup, c.Schedule = 1e-2, 0, "constant"
	c.GradClip = 0.5
	c.EvalEvery = 0
	c.Seed = 7
	c.Tokenizer = "char" // the config's validation: a BPE needs vocab ≥ 256
	return c
}

// stepStats is what one step cost on the stream.
type stepStats struct {
	cbs, waits, syncs, dispatches int64
}

// trainDevices opens the devices of a training test, which -short skips:
// the test device (and its Backend) and the CPU.
func trainDevices(t *testing.T) (dev *forge.Device, mb *Backend, cpuDev *forge.Device) {
	t.Helper()
	if testing.Short() {
		t.Skip("trains on the emulator")
	}
	dev = openTestDevice(t)
	cpuDev, err := forge.OpenDevice("cpu")
	if err != nil {
		t.Fatal(err)
	}
	return dev, backendOf(dev), cpuDev
}

// backendOf is the Metal backend dev runs on (the registry's, under the
// device's name), or nil for another backend.
func backendOf(dev *forge.Device) *Backend {
	b, err := backend.Open(dev.Name())
	if err != nil {
		panic(err)
	}
	mb, _ := b.(*Backend)
	return mb
}

// useDevice makes dev the default device until the test ends.
func useDevice(t *testing.T, dev *forge.Device) {
	prev := forge.DefaultDevice()
	forge.SetDefaultDevice(dev)
	t.Cleanup(func() { forge.SetDefaultDevice(prev) })
}

// newTrainer builds cfg's model and a trainer on the seeded batches
// (seqBatches) on the default device; it panics on an error (call it in
// forge.Try).
func newTrainer(cfg train.Config) (*gpt.Model, *train.Trainer) {
	m, err := gpt.New(cfg.Model, cfg.Seed)
	if err != nil {
		panic(err)
	}
	src := &seqBatches{rng: rand.New(rand.NewPCG(cfg.Seed, 11)), vocab: cfg.Model.Vocab, b: cfg.Batch, tt: cfg.Model.Context}
	tr, err := train.NewTrainer(cfg, m, src, nil)
	if err != nil {
		panic(err)
	}
	return m, tr
}

// trainRun trains cfg for steps steps on dev (the default device for the
// duration) and returns the records, the final weights by name and, on a
// Metal device, each step's stream counts.
func trainRun(dev *forge.Device, cfg train.Config, steps int) (ms []train.Metrics, weights map[string][]float32, st []stepStats, err error) {
	prev := forge.DefaultDevice()
	forge.SetDefaultDevice(dev)
	defer forge.SetDefaultDevice(prev)
	mb := backendOf(dev)
	err = forge.Try(func() {
		m, tr := newTrainer(cfg)
		dev.Sync() // the initial weights and moments: not part of a step
		for range steps {
			var before StreamStats
			if mb != nil {
				before = mb.StreamStats()
			}
			ms = append(ms, tr.Step())
			if mb != nil {
				after := mb.StreamStats()
				st = append(st, stepStats{after.CommandBuffers - before.CommandBuffers, after.Waits - before.Waits,
					after.Syncs - before.Syncs, after.Dispatches - before.Dispatches})
			}
		}
		weights = map[string][]float32{}
		for _, p := range m.Params() {
			weights[p.Name] = p.Tensor.Float32s()
		}
	})
	return ms, weights, st, err
}

// TestTrainMatchesCPU trains the tiny GPT for five steps on metal-emu and on
// the CPU: the losses must agree within 1e-4 relative, and each step must
// be one command buffer and one wait. With GradAccum 2 (two steps), each
// step is two command buffers (one per micro-batch, the first submitted
// when its backward is queued) and still one wait for the whole step.
func TestTrainMatchesCPU(t *testing.T) {
	dev, mb, cpuDev := trainDevices(t)
	if c := trainConfig(1); func() bool { s, _ := mb.splitKPlan(c.Model.Dim, c.Model.Dim, c.Batch*c.Model.Context); return s < 2 }() {
		t.Errorf("the weight gradients of the test model (%d × %d × %d) would not take the split-K path", c.Model.Dim, c.Model.Dim, c.Batch*c.Model.Context)
	}
	for _, tc := range []struct{ accum, steps int }{{1, 5}, {2, 2}} {
		t.Run(fmt.Sprintf("accum%d", tc.accum), func(t *testing.T) {
			cfg := trainConfig(tc.accum)
			want, wantW, _, err := trainRun(cpuDev, cfg, tc.steps)
			if err != nil {
				t.Fatalf("cpu: %v", err)
			}
			got, gotW, st, err := trainRun(dev, cfg, tc.steps)
			if err != nil {
				t.Fatalf("training on %s: %v", mb.Name(), err)
			}
			clipped := 0
			for i := range want {
				g, w := got[i], want[i]
				rel := math.Abs(g.Loss-w.Loss) / math.Abs(w.Loss)
				nrel := math.Abs(g.GradNorm-w.GradNorm) / math.Abs(w.GradNorm)
				t.Logf("step %d: loss metal-emu %.7f cpu %.7f (rel %.1e); grad norm %.6f / %.6f (rel %.1e); %d dispatches in %d command buffers, %d waits, %d syncs",
					i+1, g.Loss, w.Loss, rel, g.GradNorm, w.GradNorm, nrel, st[i].dispatches, st[i].cbs, st[i].waits, st[i].syncs)
				if !(rel <= 1e-4) {
					t.Errorf("step %d: loss %.7f on metal-emu, %.7f on the CPU (relative difference %.1e > 1e-4)", i+1, g.Loss, w.Loss, rel)
				}
				if !(nrel <= 1e-3) {
					t.Errorf("step %d: grad norm %.6f on metal-emu, %.6f on the CPU", i+1, g.GradNorm, w.GradNorm)
				}
				if g.Skipped || w.Skipped || g.Step != i+1 || w.Step != i+1 {
					t.Errorf("step %d: skipped %v/%v, step %d/%d", i+1, g.Skipped, w.Skipped, g.Step, w.Step)
				}
				if w.GradNorm > cfg.GradClip {
					clipped++
				}
				if want := int64(tc.accum); st[i].cbs != want || st[i].syncs != 1 || st[i].waits != want {
					t.Errorf("step %d: %d command buffers, %d waits in %d syncs; want %d command buffers and one sync",
						i+1, st[i].cbs, st[i].waits, st[i].syncs, want)
				}
			}
			if clipped == 0 {
				t.Errorf("no step was clipped (max norm %v): the test does not exercise the device-side clip", cfg.GradClip)
			}
			if tc.steps >= 5 && want[len(want)-1].Loss >= want[0].Loss {
				t.Errorf("the loss did not fall: %v → %v", want[0].Loss, want[len(want)-1].Loss)
			}
			// The trained weights, relative to each tensor's largest value.
			// Looser than the losses: AdamW's first steps amplify last-bit
			// differences of a gradient near eps (the update is about
			// lr·g/(|g| + eps)), as forge/train's PyTorch parity test notes;
			// the difference then reaches ~5e-4 of a tensor's largest
			// weight in a few elements while the losses agree to the bit.
			worst := 0.0
			for name, w := range wantW {
				g := gotW[name]
				scale, diff := 0.0, 0.0
				for i := range w {
					scale = max(scale, math.Abs(float64(w[i])))
					diff = max(diff, math.Abs(float64(g[i]-w[i])))
				}
				if d := diff / scale; !(d <= 2e-3) {
					t.Errorf("weight %s differs by %.1e (relative to its largest element)", name, d)
				} else {
					worst = max(worst, d)
				}
			}
			t.Logf("trained weights: worst difference %.1e relative to each tensor's largest element", worst)

			// Deterministic: another thread schedule gives the same bits.
			drv, ok := mb.Driver().(*emu.Driver)
			if !ok {
				return
			}
			drv.SetSchedule(emu.Random, 99)
			again, againW, _, err := trainRun(dev, cfg, tc.steps)
			restoreSchedule(drv)
			if err != nil {
				t.Fatalf("random schedule: %v", err)
			}
			for i := range got {
				if math.Float64bits(again[i].Loss) != math.Float64bits(got[i].Loss) || math.Float64bits(again[i].GradNorm) != math.Float64bits(got[i].GradNorm) {
					t.Errorf("step %d: a random thread schedule gives loss %v and norm %v, the first run %v and %v", i+1, again[i].Loss, again[i].GradNorm, got[i].Loss, got[i].GradNorm)
				}
			}
			for name, w := range gotW {
				if !slices.Equal(againW[name], w) {
					t.Errorf("weight %s differs under a random thread schedule", name)
				}
			}
		})
	}
}

// restoreSchedule puts back the schedule the driver opened with
// (FORGE_EMU_SCHEDULE, forward by default).
func restoreSchedule(drv *emu.Driver) {
	s, seed := emu.Forward, uint64(0)
	if env := os.Getenv("FORGE_EMU_SCHEDULE"); env != "" {
		if es, eseed, err := emu.ParseSchedule(env); err == nil {
			s, seed = es, eseed
		}
	}
	drv.SetSchedule(s, seed)
}

// TestTrainStepProfile profiles a training step on metal-emu: every kernel
// call, the device-side clip and the split-K weight gradients included, is
// recorded with its device time (each in a command buffer of its own while
// profiling), and the next unprofiled step is again one command buffer.
func TestTrainStepProfile(t *testing.T) {
	dev, mb, _ := trainDevices(t)
	useDevice(t, dev)
	var tr *train.Trainer
	var p *profile.Profile
	var cbs, dispatches int64
	err := forge.Try(func() {
		_, tr = newTrainer(trainConfig(1))
		tr.Step()
		before := mb.StreamStats()
		p = profile.Run(func() { tr.Step() })
		after := mb.StreamStats()
		cbs, dispatches = after.CommandBuffers-before.CommandBuffers, after.Dispatches-before.Dispatches
	})
	if err != nil {
		t.Fatalf("training on %s: %v", mb.Name(), err)
	}
	seen := map[string]time.Duration{}
	for _, r := range p.Records {
		if r.Device != testDevice() {
			t.Errorf("kernel %s recorded on %q", r.Kernel, r.Device)
		}
		seen[r.Kernel] += r.Duration
	}
	for _, k := range []string{"matmul", "sum_squares", "grad_clip", "adamw_clipped", "attention", "cross_entropy"} {
		if seen[k] <= 0 {
			t.Errorf("kernel %s: device time %v in the profile (kernels seen: %d)", k, seen[k], len(seen))
		}
	}
	if cbs != dispatches {
		t.Errorf("profiling: %d command buffers for %d dispatches, want one each", cbs, dispatches)
	}
	before := mb.StreamStats()
	if err := forge.Try(func() { tr.Step() }); err != nil {
		t.Fatal(err)
	}
	if after := mb.StreamStats(); after.CommandBuffers-before.CommandBuffers != 1 || after.Syncs-before.Syncs != 1 {
		t.Errorf("after profiling, a step took %d command buffers and %d syncs", after.CommandBuffers-before.CommandBuffers, after.Syncs-before.Syncs)
	}
	t.Logf("profiled step: %d kernel calls, %d dispatches; grad_clip %v, adamw_clipped %v, matmul %v (emulated device time)",
		len(p.Records), dispatches, seen["grad_clip"], seen["adamw_clipped"], seen["matmul"])
}

// TestBackwardQueuesWithoutWaiting: loss.Backward() through the
// cross-entropy queues the whole backward pass without waiting for the
// device, even when the loss's gradient comes from a kernel (a loss
// scaled after the cross-entropy): the cross-entropy backward reads it on
// the device.
func TestBackwardQueuesWithoutWaiting(t *testing.T) {
	dev := openTestDevice(t)
	mb := backendOf(dev)
	logits := forge.FromSlice([]float32{0.1, 0.7, -0.3, 1.2, 0.4, -0.8}, 2, 3).To(dev).RequiresGrad()
	targets := forge.FromSlice([]int32{2, 0}, 2).To(dev)
	// The loss scaled by a kernel (its gradient, 3, is computed on the
	// device): the cross-entropy backward reads it there.
	loss := forge.CrossEntropy(logits.MulScalar(2), targets, -1).MulScalar(3)
	mb.Sync()
	before := mb.StreamStats()
	loss.Backward()
	if after := mb.StreamStats(); after.Waits != before.Waits || after.Syncs != before.Syncs {
		t.Errorf("loss.Backward() waited for the device: %d waits, %d syncs", after.Waits-before.Waits, after.Syncs-before.Syncs)
	}
	// The gradient itself: 3·2·(softmax(2x) − onehot)/2 per row.
	x := []float64{0.1, 0.7, -0.3, 1.2, 0.4, -0.8}
	tg := []int{2, 0}
	got := logits.Grad().Float64s()
	for r := range 2 {
		sum := 0.0
		for c := range 3 {
			sum += math.Exp(2 * x[3*r+c])
		}
		for c := range 3 {
			want := math.Exp(2*x[3*r+c]) / sum
			if c == tg[r] {
				want--
			}
			want *= 3
			if g := got[3*r+c]; math.Abs(g-want) > 1e-6 {
				t.Errorf("grad[%d][%d] = %v, want %v", r, c, g, want)
			}
		}
	}
}
