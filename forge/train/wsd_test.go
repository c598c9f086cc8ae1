package train

import (
	"context"
	"math"
	"testing"
)

// TestWSDExtends: a WSD run of 10 steps, cooled down to MinLR, asked for
// 6 more goes back to the plateau's LR right after step 10, holds it,
// and cools down (1−√) to end at step 16 as a 16-step run would; the run
// directory's config records 16 steps, so the run reopens with the same
// schedule and asks for no more steps.
func TestWSDExtends(t *testing.T) {
	cfg := testRunConfig()
	cfg.Schedule, cfg.Steps, cfg.Warmup, cfg.Cooldown, cfg.SaveEvery, cfg.EvalEvery = "wsd", 10, 2, 0.25, 0, 0
	cfg.LR, cfg.MinLR = 1e-3, 1e-4
	dir := t.TempDir()
	s := openTest(t, dir, &cfg)
	if _, err := s.Train(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	lrs := func() []float64 {
		var out []float64
		for _, m := range s.trainer.History.Steps {
			out = append(out, m.LR)
		}
		return out
	}
	first := lrs()
	// 10 steps, cool-down int(0.25·10) = 2: steps 8 and 9 (0-based).
	if first[7] != cfg.LR || first[8] != cfg.LR || first[9] != cfg.MinLR+(cfg.LR-cfg.MinLR)*(1-math.Sqrt(0.5)) {
		t.Fatalf("the 10-step run's rates %v: want LR to step 9 (1-based), then the 1−√ cool-down", first)
	}
	if s.trainer.LR() != cfg.MinLR {
		t.Fatalf("after the run the schedule gives %v, want MinLR %v", s.trainer.LR(), cfg.MinLR)
	}
	if _, err := s.Train(context.Background(), 6); err != nil {
		t.Fatal(err)
	}
	all := lrs()
	// 16 steps, cool-down int(0.25·16) = 4: 0-based steps 12–15.
	for step := 10; step < 12; step++ {
		if all[step] != cfg.LR {
			t.Errorf("0-based step %d after extending: lr %v, want the plateau's %v", step, all[step], cfg.LR)
		}
	}
	for step := 12; step < 16; step++ {
		want := cfg.MinLR + (cfg.LR-cfg.MinLR)*(1-math.Sqrt(float64(step-12)/4))
		if math.Abs(all[step]-want) > 1e-18 {
			t.Errorf("0-based step %d: lr %v, want the new cool-down's %v", step, all[step], want)
		}
	}
	if all[15] >= all[14] || s.trainer.LR() != cfg.MinLR {
		t.Errorf("the extended run does not end cooled down: %v, then %v", all[12:], s.trainer.LR())
	}
	if s.Config().Steps != 16 {
		t.Errorf("the session's config has %d steps, want 16", s.Config().Steps)
	}
	s.Close()
	r := openTest(t, dir, nil)
	defer r.Close()
	if r.Config().Steps != 16 || r.trainer.LR() != cfg.MinLR {
		t.Errorf("reopened: %d steps, next lr %v; want 16 and MinLR", r.Config().Steps, r.trainer.LR())
	}

	// A cosine run is not extended: its rates so far depend on its length.
	cos := testRunConfig()
	cos.Steps, cos.SaveEvery, cos.EvalEvery = 4, 0, 0
	c := openTest(t, t.TempDir(), &cos)
	defer c.Close()
	if _, err := c.Train(context.Background(), 6); err != nil {
		t.Fatal(err)
	}
	if c.Config().Steps != 4 || c.trainer.History.Steps[5].LR != cos.LR/10 {
		t.Errorf("cosine past its end: %d steps, lr %v; want 4 steps and lr/10", c.Config().Steps, c.trainer.History.Steps[5].LR)
	}
}
