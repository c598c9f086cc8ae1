package optim

import "math"

// WarmupCosine is nanoGPT's schedule: a linear warmup over the first Warmup
// steps, lr·(step+1)/(Warmup+1) (never 0, never LR itself during
// warmup), then a cosine decay from LR at step Warmup to MinLR at step
// Total, and MinLR after. The seed configs use MinLR = LR/10.
type WarmupCosine struct {
	LR, MinLR     float64
	Warmup, Total int
}

// At returns the learning rate of the 0-based step.
func (s WarmupCosine) At(step int) float64 {
	if step < s.Warmup {
		return warmup(s.LR, s.Warmup, step)
	}
	if step >= s.Total || s.Total <= s.Warmup {
		return s.MinLR
	}
	r := float64(step-s.Warmup) / float64(s.Total-s.Warmup)
	c := 0.5 * (1 + math.Cos(math.Pi*r))
	return s.MinLR + c*(s.LR-s.MinLR)
}

// WSD is the warmup–stable–decay schedule: the same linear warmup as
// WarmupCosine over the first Warmup steps, LR held constant until step
// Total−Decay, then the 1−√ cool-down reaching MinLR at step Total, and
// MinLR after:
//
//	r     = (step − (Total−Decay)) / Decay      // 0 → 1 over the cool-down
//	lr(r) = MinLR + (LR − MinLR)·(1 − √r)
//
// Decay is clamped to the steps left after the warmup. The cool-down
// falls fastest at its start and flattens towards MinLR (the seed's
// shape; a linear one spends longer at high rates). Since the plateau is
// flat, a run can be extended: a WSD with a larger Total gives the same
// rates up to the old plateau's end and keeps LR until its own cool-down
// (train.Trainer.Extend).
type WSD struct {
	LR, MinLR            float64
	Warmup, Decay, Total int
}

// At returns the learning rate of the 0-based step.
func (s WSD) At(step int) float64 {
	if step < s.Warmup {
		return warmup(s.LR, s.Warmup, step)
	}
	if step >= s.Total {
		return s.MinLR
	}
	decay := min(max(s.Decay, 0), s.Total-s.Warmup)
	start := s.Total - decay
	if step < start {
		return s.LR
	}
	r := float64(step-start) / float64(decay)
	return s.MinLR + (s.LR-s.MinLR)*(1-math.Sqrt(r))
}

func warmup(lr float64, n, step int) float64 {
	return lr * float64(step+1) / float64(n+1)
}
