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
// Total−Decay, then a linear decay reaching MinLR at step Total, and MinLR
// after. Decay is clamped to the steps left after the warmup.
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
	return s.LR + r*(s.MinLR-s.LR)
}

func warmup(lr float64, n, step int) float64 {
	return lr * float64(step+1) / float64(n+1)
}
