package train

// Step benchmarks: full training steps of a config, timed %timeit style
// with forge/profile's Bench and, on request, profiled kernel by kernel.

import (
	"fmt"
	"strings"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/profile"
	"github.com/forgeml/forge/internal/numfmt"
)

// BenchStepOptions control BenchStep.
type BenchStepOptions struct {
	Bench        profile.BenchOptions // timing of the plain step (default budget 1 s, at least 3 steps)
	Profile      bool                 // also record a profile of ProfileSteps steps
	ProfileSteps int                  // default 5
	Seed         uint64               // weights and the batch
}

// BenchStepResult is the benchmark of one training step of a config.
type BenchStepResult struct {
	Config  string  `json:"config"`
	Params  int     `json:"params"`
	Batch   int     `json:"batch"`
	Context int     `json:"context"`
	Tokens  int     `json:"tokens"` // per step
	FLOPs   float64 `json:"flops"`  // per step: the model's estimate (6·params + attention, per token)
	profile.BenchResult
	TokensPerSec float64          `json:"tokens_per_sec"` // at the median step time
	GFLOPS       float64          `json:"gflops"`         // at the median step time
	Profile      *profile.Profile `json:"-"`              // with BenchStepOptions.Profile
}

// String is a summary line and the %timeit line.
func (s *BenchStepResult) String() string {
	return fmt.Sprintf("step %s: %s parameters, batch %d × context %d = %d tokens, %.2f GFLOP/step: %.0f tokens/s, %.1f GFLOP/s\n  %s",
		s.Config, numfmt.Thousands(s.Params), s.Batch, s.Context, s.Tokens, s.FLOPs/1e9, s.TokensPerSec, s.GFLOPS,
		strings.Replace(s.BenchResult.String(), "per loop", "per step", 1))
}

// BenchStep times full training steps (zero grad, forward, loss,
// backward, clipping, AdamW) of the named config (or config file) on the
// default device, on one fixed batch of random tokens at a constant
// learning rate, as tests/benchtrain and the PyTorch baseline do. With
// opts.Profile it then records ProfileSteps more steps; the batch loading
// shows as the host phase "data" and each block's forward kernels as the
// scope "blocks.N". It returns errors for unknown configs.
func BenchStep(config string, opts BenchStepOptions) (*BenchStepResult, error) {
	tr, err := newBenchTrainer(config, opts.Seed)
	if err != nil {
		return nil, err
	}
	cfg := tr.Config
	res := &BenchStepResult{
		Config: cfg.Name, Params: nn.Count(tr.Model), Batch: cfg.Batch, Context: cfg.Model.Context,
		Tokens: cfg.TokensPerStep(),
	}
	res.FLOPs = float64(cfg.Model.FLOPsPerToken()) * float64(res.Tokens)
	dev := forge.DefaultDevice()
	bo := opts.Bench
	if bo.Sync == nil {
		bo.Sync = dev.Sync
	}
	bo.Loops = max(bo.Loops, 1)
	res.BenchResult = profile.Bench(func() { tr.Step() }, bo)
	if s := res.Median.Seconds(); s > 0 {
		res.TokensPerSec = float64(res.Tokens) / s
		res.GFLOPS = res.FLOPs / s / 1e9
	}
	if opts.Profile {
		n := opts.ProfileSteps
		if n <= 0 {
			n = 5
		}
		res.Profile = profile.RunN(n, func() {
			tr.Step()
			dev.Sync()
		})
	}
	return res, nil
}

// benchBatch serves one batch forever, timing each draw as host phase "data".
type benchBatch struct{ x, y []int32 }

func (f benchBatch) Next() (x, y []int32) {
	profile.TimeHost("data", func() { x, y = f.x, f.y })
	return x, y
}

// newBenchTrainer builds a trainer of config on one fixed batch of uniform
// random tokens, lr 3e-4 with no schedule and no gradient accumulation.
func newBenchTrainer(config string, seed uint64) (*Trainer, error) {
	cfg, err := LoadConfig(config)
	if err != nil {
		return nil, err
	}
	cfg.LR, cfg.Warmup, cfg.Schedule, cfg.GradAccum = 3e-4, 0, "constant", 1
	m, err := gpt.New(cfg.Model, seed)
	if err != nil {
		return nil, err
	}
	B, T := cfg.Batch, cfg.Model.Context
	data := forge.NewGenerator(seed+1).RandInt(0, cfg.Model.Vocab, B, T+1).Int32s()
	x, y := make([]int32, 0, B*T), make([]int32, 0, B*T)
	for b := range B {
		row := data[b*(T+1) : (b+1)*(T+1)]
		x, y = append(x, row[:T]...), append(y, row[1:]...)
	}
	return NewTrainer(cfg, m, benchBatch{x, y}, nil)
}
