package optim

import (
	"math"
	"testing"
)

func TestWarmupCosine(t *testing.T) {
	const lr, minLR = 1e-3, 1e-4
	s := WarmupCosine{LR: lr, MinLR: minLR, Warmup: 4, Total: 24}
	cases := []struct {
		step int
		want float64
	}{
		{0, lr * 1 / 5}, // (it+1)/(warmup+1): no zero-LR step
		{1, lr * 2 / 5},
		{3, lr * 4 / 5},
		{4, lr}, // cosine starts at LR
		{9, minLR + 0.5*(1+math.Cos(math.Pi*5/20))*(lr-minLR)},
		{14, (lr + minLR) / 2}, // halfway
		{23, minLR + 0.5*(1+math.Cos(math.Pi*19/20))*(lr-minLR)},
		{24, minLR},
		{1000, minLR},
	}
	for _, c := range cases {
		if got := s.At(c.step); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("At(%d) = %v, want %v", c.step, got, c.want)
		}
	}
	// Monotone after warmup.
	for i := 5; i <= 30; i++ {
		if s.At(i) > s.At(i-1) {
			t.Errorf("At(%d) = %v rises above At(%d) = %v", i, s.At(i), i-1, s.At(i-1))
		}
	}
}

func TestWSD(t *testing.T) {
	const lr, minLR = 2e-3, 2e-4
	s := WSD{LR: lr, MinLR: minLR, Warmup: 3, Decay: 10, Total: 50}
	cases := []struct {
		step int
		want float64
	}{
		{0, lr / 4},
		{2, lr * 3 / 4},
		{3, lr},
		{39, lr},
		{40, lr}, // decay starts at Total−Decay
		{41, minLR + (lr-minLR)*(1-math.Sqrt(0.1))},
		{45, minLR + (lr-minLR)*(1-math.Sqrt(0.5))},
		{49, minLR + (lr-minLR)*(1-math.Sqrt(0.9))},
		{50, minLR},
		{99, minLR},
	}
	for _, c := range cases {
		if got := s.At(c.step); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("At(%d) = %v, want %v", c.step, got, c.want)
		}
	}
	// Decay longer than the steps after warmup is clamped to them.
	short := WSD{LR: 1, MinLR: 0, Warmup: 2, Decay: 100, Total: 10}
	if got := short.At(2); got != 1 {
		t.Errorf("clamped decay: At(2) = %v, want 1", got)
	}
	if got, want := short.At(6), 1-math.Sqrt(0.5); math.Abs(got-want) > 1e-15 {
		t.Errorf("clamped decay: At(6) = %v, want 1 − √0.5 = %v", got, want)
	}
	// The 1−√ shape: below the linear ramp inside the cool-down, at
	// a quarter of it exactly halfway down.
	sq := WSD{LR: 1, MinLR: 0, Decay: 100, Total: 100}
	if got := sq.At(25); math.Abs(got-0.5) > 1e-15 {
		t.Errorf("At(25) of a 100-step cool-down from 1 to 0 = %v, want 1 − √0.25 = 0.5", got)
	}
	for step := 1; step < 100; step++ {
		if got, linear := sq.At(step), 1-float64(step)/100; got >= linear {
			t.Fatalf("At(%d) = %v, not below the linear %v", step, got, linear)
		}
	}
	var _ Schedule = s
	var _ Schedule = WarmupCosine{}
}
