package doctor

// Timings beside the seed project's published figures. The seed (the
// C++/Metal project Forge descends from) measured on an Apple M5 Max
// (40-core GPU), float32, simdgroup_matrix kernels: its README's GEMM table,
// its research notes' attention table at gpt-10m shapes (B64 T512 H6
// hd64, causal; the backward with dK and dV split), and gpt-10m training
// throughput. Off the GPU the sizes shrink by a stated scale, and the
// seed's figure is printed for reference only.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/profile"
	"github.com/forgeml/forge/forge/train"
)

// seedGEMM are the seed's GEMM figures: TFLOP/s at M×N×K per layout.
var seedGEMM = []struct {
	what    string
	layout  string // nn: A·B, nt: A·Bᵀ, tn: Aᵀ·B
	m, n, k int
	tflops  float64
}{
	{"4096³", "nn", 4096, 4096, 4096, 9.49},
	{"forward X·W₁ᵀ", "nt", 65536, 1408, 512, 10.68},
	{"backward dX = dY·W", "nn", 65536, 512, 1408, 10.58},
	{"backward dW = dYᵀ·X", "tn", 1408, 512, 65536, 4.69},
}

// The seed's attention (ms per layer) and training figures at gpt-10m.
const (
	seedAttnFwdMS  = 2.3
	seedAttnBwdMS  = 7.05
	seedTokensPerS = 38200
	seedDevice     = "seed (M-series GPU: M5 Max)"
)

// scales are the shrink factors off the GPU: GEMM dimensions divided by
// gemm, attention at batch × context, the gpt-10m step at batch × context.
type scales struct {
	gemm               int
	attnB, attnT       int
	stepBatch, stepCtx int
	budget             time.Duration
	label              string
}

func (r *run) scales() scales {
	gpu := r.dev.Name() == "metal"
	switch {
	case gpu && !r.opts.Short:
		return scales{gemm: 1, attnB: 64, attnT: 512, stepBatch: 0, stepCtx: 0, budget: time.Second, label: "the seed's sizes"}
	case r.dev.Name() == "cpu" && !r.opts.Short:
		return scales{gemm: 8, attnB: 2, attnT: 256, stepBatch: 1, stepCtx: 64, budget: 400 * time.Millisecond, label: "scaled down (not a GPU)"}
	case !r.opts.Short:
		return scales{gemm: 32, attnB: 1, attnT: 64, stepBatch: 1, stepCtx: 16, budget: 300 * time.Millisecond, label: "scaled down (emulated)"}
	}
	return scales{gemm: 64, attnB: 1, attnT: 32, stepBatch: 1, stepCtx: 8, budget: 20 * time.Millisecond, label: "scaled down (short run)"}
}

func (r *run) bench(fn func(), budget time.Duration) profile.BenchResult {
	return profile.Bench(fn, profile.BenchOptions{Budget: budget, MinRuns: 1, Sync: r.dev.Sync})
}

func (r *run) timings() {
	s := r.scales()
	r.section("Timings beside the seed's figures")
	if r.dev.Name() != "metal" {
		r.line("%s is not an Apple GPU: sizes are %s, and the seed's Apple-GPU figures are printed for reference, not for comparison.", r.dev.Name(), s.label)
		if metalOf(r.dev) != nil {
			r.line("The emulator runs the MSL kernels on this CPU: its times measure the emulation, not a GPU.")
		}
	}
	prev := forge.DefaultDevice()
	forge.SetDefaultDevice(r.dev)
	defer forge.SetDefaultDevice(prev)
	if err := forge.Try(func() { r.gemmTimings(s) }); err != nil {
		r.fail("GEMM timing: %v", err)
	}
	if err := forge.Try(func() { r.attentionTimings(s) }); err != nil {
		r.fail("attention timing: %v", err)
	}
	if err := r.stepTiming(s); err != nil {
		r.fail("gpt-10m step timing: %v", err)
	}
}

func (r *run) gemmTimings(s scales) {
	r.line("\nGEMM, float32 (TFLOP/s at the median):\n")
	r.line("| shape | layout | M×N×K here | %s | %s |", r.dev.Name(), seedDevice)
	r.line("|---|---|---|--:|--:|")
	gen := forge.NewGenerator(3)
	for _, g := range seedGEMM {
		m, n, k := max(1, g.m/s.gemm), max(1, g.n/s.gemm), max(1, g.k/s.gemm)
		var a, b *forge.Tensor
		var mul func() *forge.Tensor
		switch g.layout {
		case "nn":
			a, b = gen.Randn(forge.Float32, m, k).To(r.dev), gen.Randn(forge.Float32, k, n).To(r.dev)
			mul = func() *forge.Tensor { return a.MatMul(b) }
		case "nt":
			a, b = gen.Randn(forge.Float32, m, k).To(r.dev), gen.Randn(forge.Float32, n, k).To(r.dev)
			mul = func() *forge.Tensor { return a.MatMul(b.T()) }
		case "tn":
			a, b = gen.Randn(forge.Float32, k, m).To(r.dev), gen.Randn(forge.Float32, k, n).To(r.dev)
			mul = func() *forge.Tensor { return a.T().MatMul(b) }
		}
		res := r.bench(func() { mul() }, s.budget)
		tf := 2 * float64(m) * float64(n) * float64(k) / res.Median.Seconds() / 1e12
		scale := ""
		if s.gemm > 1 {
			scale = fmt.Sprintf(" (1/%d per dim)", s.gemm)
		}
		r.line("| %s | %s | %d×%d×%d%s | %.3g | %.2f |", g.what, g.layout, m, n, k, scale, tf, g.tflops)
		r.progress("timing: GEMM %s %d×%d×%d: %.3g TFLOP/s", g.layout, m, n, k, tf)
	}
}

func (r *run) attentionTimings(s scales) {
	const h, d = 6, 64
	gen := forge.NewGenerator(4)
	shape := []int{s.attnB, h, s.attnT, d}
	q := gen.Randn(forge.Float32, shape...).To(r.dev).RequiresGrad()
	k := gen.Randn(forge.Float32, shape...).To(r.dev).RequiresGrad()
	v := gen.Randn(forge.Float32, shape...).To(r.dev).RequiresGrad()
	g := gen.Randn(forge.Float32, shape...).To(r.dev)
	fwd := r.bench(func() { forge.NoGrad(func() { forge.Attention(q, k, v, true) }) }, s.budget)
	both := r.bench(func() {
		forge.Attention(q, k, v, true).Backward(g)
		for _, t := range []*forge.Tensor{q, k, v} {
			t.ZeroGrad()
		}
	}, s.budget)
	bwd := both.Median - fwd.Median
	work := float64(64*512*512) / float64(s.attnB*s.attnT*s.attnT)
	scale := ""
	if work != 1 {
		scale = fmt.Sprintf(" (1/%.0f of the seed's work)", work)
	}
	r.line("\nAttention at gpt-10m shapes (causal, H6 hd64; ms per layer at the median; backward = forward+backward − forward):\n")
	r.line("| pass | B×T here | %s | %s at B64 T512 |", r.dev.Name(), seedDevice)
	r.line("|---|---|--:|--:|")
	r.line("| forward | %d×%d%s | %.3f | %.2f |", s.attnB, s.attnT, scale, ms(fwd.Median), seedAttnFwdMS)
	r.line("| backward | %d×%d%s | %.3f | %.2f |", s.attnB, s.attnT, scale, ms(bwd), seedAttnBwdMS)
	r.progress("timing: attention B%d T%d: forward %.3f ms, backward %.3f ms", s.attnB, s.attnT, ms(fwd.Median), ms(bwd))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r *run) stepTiming(s scales) error {
	cfg, err := train.LoadConfig("gpt-10m")
	if err != nil {
		return err
	}
	full := fmt.Sprintf("context %d", cfg.Model.Context)
	here := fmt.Sprintf("batch %d × context %d", cfg.Batch, cfg.Model.Context)
	if s.stepBatch > 0 {
		cfg.Batch, cfg.Model.Context = s.stepBatch, s.stepCtx
		here = fmt.Sprintf("batch %d × context %d (scaled)", cfg.Batch, cfg.Model.Context)
	}
	cfg.Name = "gpt-10m"
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "forge-doctor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "gpt-10m.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	prev := forge.DefaultDevice()
	forge.SetDefaultDevice(r.dev)
	defer forge.SetDefaultDevice(prev)
	var res *train.BenchStepResult
	if e := forge.Try(func() {
		res, err = train.BenchStep(path, train.BenchStepOptions{Bench: profile.BenchOptions{Budget: s.budget, MinRuns: 1}, Seed: 1})
	}); e != nil {
		return e
	}
	if err != nil {
		return err
	}
	r.line("\nTraining step of gpt-10m (tokens/s at the median step):\n")
	r.line("| config | %s | %s at %s |", r.dev.Name(), seedDevice, full)
	r.line("|---|--:|--:|")
	r.line("| %s | %.0f | %.0f |", here, res.TokensPerSec, float64(seedTokensPerS))
	r.progress("timing: gpt-10m step, %s: %.0f tokens/s", here, res.TokensPerSec)
	return nil
}
