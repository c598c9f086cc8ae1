package metal

// Mixed-precision training (train.Config.Precision) on the emulated Metal
// device: activations and matmuls in bfloat16 or float16 with float32
// master weights and residual stream, against the all-float32 run on the
// CPU (and a check that the activations really are 16-bit); and
// float16's dynamic loss scaling — an overflowing scale skips the step
// and halves, good steps double it, and a resumed run continues with the
// saved scale, bit for bit.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/profile"
	"github.com/forgeml/forge/forge/train"
)

// TestAMPMatchesCPU trains the tiny GPT of TestTrainMatchesCPU for eight
// steps in bfloat16 and in float16 on metal-emu and in float32 on the
// CPU, from the same weights and batches.
//
// Tolerance. Each kernel between a norm and the residual add rounds its
// output once to the format (unit roundoff u = 2⁻⁸ for bfloat16, 2⁻¹¹ for
// float16; a matmul rounds its weight operand too), and computes in
// float32, which adds nothing comparable. A logit thus carries a relative
// error of a few u (one rounding per kernel on its path), and so does
// every gradient. The
// loss itself is an average over 256 tokens of ln Σexp(z) − z_target,
// whose error is a few u times the logits' spread (well under 1 at these
// sizes), so the first loss agrees to far better than u. Later losses
// also inherit the difference of the weights: AdamW's update is about
// lr·sign(g) per element, so elements whose gradient is within a few u of
// zero may move by up to 2·lr = 0.02 the other way, and the loss drifts
// by a small multiple of u over eight steps. The bound is 4u relative
// (1.6e-2 for bfloat16, 2.0e-3 for float16); the log shows the measured
// differences. The gradient norm, a sum over all elements, is held to
// the same bound.
func TestAMPMatchesCPU(t *testing.T) {
	dev, mb, cpuDev := trainDevices(t)
	const steps = 8
	ref := trainConfig(1)
	want, _, _, err := trainRun(cpuDev, ref, steps)
	if err != nil {
		t.Fatalf("cpu: %v", err)
	}
	if want[steps-1].Loss >= want[0].Loss {
		t.Fatalf("the float32 loss did not fall: %v → %v", want[0].Loss, want[steps-1].Loss)
	}
	for _, tc := range []struct {
		precision string
		u         float64 // unit roundoff
	}{{"bfloat16", 0x1p-8}, {"float16", 0x1p-11}} {
		t.Run(tc.precision, func(t *testing.T) {
			cfg := trainConfig(1)
			cfg.Precision = tc.precision
			got, _, st, err := trainRun(dev, cfg, steps)
			if err != nil {
				t.Fatalf("training on %s: %v", mb.Name(), err)
			}
			tol := 4 * tc.u
			worst, worstN := 0.0, 0.0
			for i := range want {
				g, w := got[i], want[i]
				rel := math.Abs(g.Loss-w.Loss) / math.Abs(w.Loss)
				nrel := math.Abs(g.GradNorm-w.GradNorm) / math.Abs(w.GradNorm)
				worst, worstN = max(worst, rel), max(worstN, nrel)
				t.Logf("step %d: loss %s %.6f, float32 cpu %.6f (rel %.1e); grad norm %.5f / %.5f (rel %.1e); loss scale %g; %d command buffers, %d syncs",
					i+1, tc.precision, g.Loss, w.Loss, rel, g.GradNorm, w.GradNorm, nrel, g.LossScale, st[i].cbs, st[i].syncs)
				if !(rel <= tol) {
					t.Errorf("step %d: loss %.6f in %s, %.6f in float32 (relative difference %.1e > %.1e)", i+1, g.Loss, tc.precision, w.Loss, rel, tol)
				}
				if !(nrel <= tol) {
					t.Errorf("step %d: grad norm %.6f in %s, %.6f in float32 (relative difference %.1e > %.1e)", i+1, g.GradNorm, tc.precision, w.GradNorm, nrel, tol)
				}
				if g.Skipped || g.Step != i+1 {
					t.Errorf("step %d: skipped %v, step %d", i+1, g.Skipped, g.Step)
				}
				wantScale := 0.0 // bfloat16: no loss scaling
				if tc.precision == "float16" {
					wantScale = train.DefaultLossScale
				}
				if g.LossScale != wantScale {
					t.Errorf("step %d: loss scale %g, want %g", i+1, g.LossScale, wantScale)
				}
				if st[i].cbs != 1 || st[i].syncs != 1 {
					t.Errorf("step %d: %d command buffers in %d syncs; want one of each", i+1, st[i].cbs, st[i].syncs)
				}
			}
			t.Logf("%s: worst loss difference %.1e, grad norm %.1e (bound %.1e)", tc.precision, worst, worstN, tol)
		})
	}
}

// TestAMPLossScale starts a float16 run with a loss scale of 2²⁶, beyond
// float16's range (65504 ≈ 2¹⁶) for the logits' gradient (up to 2²⁶/256): the first steps overflow, are
// skipped (no update, the step count stays) and halve the scale until a
// step goes through; after loss_scale_window (2) good steps the scale
// doubles. Then the same run in a session, saved and resumed mid-way,
// must give the records of the uninterrupted run bit for bit, the scale
// and its count of good steps included.
func TestAMPLossScale(t *testing.T) {
	dev, mb, _ := trainDevices(t)
	cfg := trainConfig(1)
	cfg.Precision = "float16"
	cfg.LossScale = 0x1p26
	cfg.LossScaleWindow = 2
	const steps = 12
	ms, _, _, err := trainRun(dev, cfg, steps)
	if err != nil {
		t.Fatalf("training on %s: %v", mb.Name(), err)
	}
	scale, updates, good, skipped, doubled := cfg.LossScale, 0, 0, 0, 0
	for i, m := range ms {
		t.Logf("step record %d: step %d, loss %.6f, grad norm %.5g, scale 2^%g, skipped %v", i+1, m.Step, m.Loss, m.GradNorm, math.Log2(m.LossScale), m.Skipped)
		if m.LossScale != scale {
			t.Fatalf("record %d: loss scale %g, want %g", i+1, m.LossScale, scale)
		}
		if m.Skipped {
			if !(math.IsInf(m.GradNorm, 0) || math.IsNaN(m.GradNorm)) {
				t.Errorf("record %d: skipped with a finite grad norm %v", i+1, m.GradNorm)
			}
			skipped++
			scale, good = scale/2, 0
		} else {
			if math.IsInf(m.GradNorm, 0) || math.IsNaN(m.GradNorm) {
				t.Errorf("record %d: not skipped with grad norm %v", i+1, m.GradNorm)
			}
			updates++
			if good++; good == cfg.LossScaleWindow {
				scale, good = scale*2, 0
				doubled++
			}
		}
		if m.Step != updates {
			t.Errorf("record %d: step %d after %d updates (a skipped step must not count)", i+1, m.Step, updates)
		}
	}
	if !ms[0].Skipped || ms[1].LossScale != cfg.LossScale/2 {
		t.Errorf("the first step (scale 2^26) was not skipped, or the scale did not halve: %v, then %g", ms[0].Skipped, ms[1].LossScale)
	}
	if updates == 0 || doubled == 0 {
		t.Errorf("%d skipped steps, %d updates, %d doublings: the test needs all three", skipped, updates, doubled)
	}

	// Resume: 7 steps, save, reopen, 5 steps == 12 steps in one go.
	useDevice(t, dev)
	cfg.Batch = 4
	text := strings.Repeat("the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. ", 40)
	run := func(dir string, parts ...int) []train.Metrics {
		t.Helper()
		var scales []float64
		for _, n := range parts {
			s, err := train.Open(dir, train.OpenOptions{Config: &cfg, Texts: []string{text}, NoCache: true})
			if err != nil {
				t.Fatal(err)
			}
			scales = append(scales, s.Trainer().LossScale())
			if _, err := s.Train(context.Background(), n); err != nil {
				t.Fatal(err)
			}
			scales = append(scales, s.Trainer().LossScale())
			s.Close()
		}
		for i := 1; i+1 < len(scales); i += 2 {
			if scales[i] != scales[i+1] {
				t.Errorf("%s: the run stopped at loss scale %g and resumed at %g", dir, scales[i], scales[i+1])
			}
		}
		s, err := train.Open(dir, train.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return s.Trainer().History.Steps
	}
	whole := run(t.TempDir(), steps)
	parts := run(t.TempDir(), 7, steps-7)
	if len(whole) != steps || len(parts) != steps {
		t.Fatalf("%d and %d records, want %d", len(whole), len(parts), steps)
	}
	sawSkip := false
	for i := range whole {
		a, b := whole[i], parts[i]
		sawSkip = sawSkip || a.Skipped
		if math.Float64bits(a.Loss) != math.Float64bits(b.Loss) || a.LossScale != b.LossScale || a.Skipped != b.Skipped || a.Step != b.Step ||
			fmt.Sprint(a.GradNorm) != fmt.Sprint(b.GradNorm) {
			t.Errorf("record %d: in one go loss %v scale %g skipped %v step %d norm %v; resumed after 7: %v %g %v %d %v",
				i+1, a.Loss, a.LossScale, a.Skipped, a.Step, a.GradNorm, b.Loss, b.LossScale, b.Skipped, b.Step, b.GradNorm)
		}
	}
	if !sawSkip {
		t.Errorf("the session run skipped no step")
	}
}

// TestAMPActivations checks that mixed precision stores the activations
// in 16 bits, not only the matmuls' operands: in a bfloat16 training step
// the norms' backward, RoPE, attention, SwiGLU and the cross-entropy (the
// logits) all run on bfloat16 data — their kernel records say so, and
// each is seen — while the loss and the parameters' gradients stay
// float32.
func TestAMPActivations(t *testing.T) {
	dev, mb, _ := trainDevices(t)
	useDevice(t, dev)
	cfg := trainConfig(1)
	cfg.Precision = "bfloat16"
	var p *profile.Profile
	var tr *train.Trainer
	err := forge.Try(func() {
		_, tr = newTrainer(cfg)
		p = profile.Run(func() { tr.Step() })
	})
	if err != nil {
		t.Fatalf("training on %s: %v", mb.Name(), err)
	}
	want := []string{"rms_norm.backward", "rope", "rope.backward", "attention", "attention.backward",
		"swiglu", "swiglu.backward", "cross_entropy", "cross_entropy.backward"}
	seen := map[string]int{}
	for _, r := range p.Records {
		if slices.Contains(want, r.Kernel) {
			seen[r.Kernel]++
			if r.DType != forge.BFloat16 {
				t.Errorf("%s ran on %v data, want bfloat16", r.Kernel, r.DType)
			}
		}
	}
	for _, k := range want {
		if seen[k] == 0 {
			t.Errorf("no %s in the step's kernels", k)
		}
	}
	for _, prm := range nn.Match(tr.Model, "*") {
		if g := prm.Tensor.Grad(); g == nil || g.DType() != forge.Float32 {
			t.Errorf("%s: gradient %v, want float32", prm.Name, g)
		}
	}
	t.Logf("bfloat16 kernels seen: %v", seen)
}

// TestAMPArchitectures trains the other architectures — GPT-2 style
// (LayerNorm with biases, GELU, learned positions, untied head) and
// SwiGLU with biases — for three bfloat16 steps on metal-emu against the
// float32 CPU (same bound as TestAMPMatchesCPU), then generates with the
// KV cache: biases (float32 parameters) meet 16-bit activations in every
// layer there.
func TestAMPArchitectures(t *testing.T) {
	dev, mb, cpuDev := trainDevices(t)
	const steps, u = 3, 0x1p-8
	for _, arch := range []struct {
		name string
		set  func(*gpt.Config)
	}{
		{"gpt2", func(c *gpt.Config) {
			c.Norm, c.MLP, c.Position, c.Bias, c.Untied, c.KVHeads = "layernorm", "gelu", "learned", true, true, 2
		}},
		{"swiglu+bias", func(c *gpt.Config) { c.Bias = true }},
		// The router reads bfloat16 norm outputs (cast to float32): a token
		// near a routing tie may pick another expert than on the CPU,
		// which the loss tolerance absorbs.
		{"moe", func(c *gpt.Config) { c.Experts, c.TopK = 4, 2 }},
	} {
		t.Run(arch.name, func(t *testing.T) {
			cfg := trainConfig(1)
			arch.set(&cfg.Model)
			want, _, _, err := trainRun(cpuDev, cfg, steps)
			if err != nil {
				t.Fatalf("cpu: %v", err)
			}
			cfg.Precision = "bfloat16"
			got, _, _, err := trainRun(dev, cfg, steps)
			if err != nil {
				t.Fatalf("training on %s: %v", mb.Name(), err)
			}
			for i := range want {
				if rel := math.Abs(got[i].Loss-want[i].Loss) / want[i].Loss; rel > 4*u {
					t.Errorf("step %d: loss %.6f, float32 cpu %.6f (rel %.1e > %.1e)", i+1, got[i].Loss, want[i].Loss, rel, 4*u)
				}
			}
			useDevice(t, dev)
			err = forge.Try(func() {
				m, err := gpt.New(cfg.Model, cfg.Seed)
				if err != nil {
					panic(err)
				}
				if err := m.SetCompute(forge.BFloat16); err != nil {
					panic(err)
				}
				out, err := m.Generate([]int{1, 2, 3}, gpt.GenerateOptions{MaxTokens: 5, Seed: 1})
				if err != nil {
					panic(err)
				}
				if len(out) != 5 {
					t.Errorf("generated %d tokens, want 5", len(out))
				}
			})
			if err != nil {
				t.Fatalf("bfloat16 generation: %v", err)
			}
		})
	}
}
