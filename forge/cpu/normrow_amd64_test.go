//go:build amd64 && !purego

package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRoPERowAVX512MatchesGo: the vector RoPE row gives ropeForward's
// bits, forward and inverse, for every vector-sized head dimension.
func TestRoPERowAVX512MatchesGo(t *testing.T) {
	if !ropeVector {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(8, 9))
	b := New()
	for _, d := range []int{8, 16, 32, 64, 128} {
		tb := b.ropeTableFor(ropeKey{t: 50, d: d, pos0: 7, theta: 10000})
		if tb.cc == nil {
			t.Fatalf("d=%d: no vector table", d)
		}
		half := d / 2
		x := make([]float32, d)
		for p := 0; p < 50; p++ {
			for i := range x {
				x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(6)-3)))
			}
			for _, inv := range []bool{false, true} {
				ss, sign := tb.ss, 1.0
				if inv {
					ss, sign = tb.ssInv, -1
				}
				got, want := make([]float32, d), make([]float32, d)
				ropeRow32(got, x, tb.cc[p*d:(p+1)*d], ss[p*d:(p+1)*d])
				ropeForward(want, x, tb.cos[p*half:(p+1)*half], tb.sin[p*half:(p+1)*half], sign)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("d=%d p=%d inverse=%v [%d]: %v, Go %v", d, p, inv, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestRMSNormBackwardRowAVX2: the assembly row of the RMSNorm backward
// against the float64 formulas, for lengths with every tail.
func TestRMSNormBackwardRowAVX2(t *testing.T) {
	if !expAVX2 {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(10, 11))
	for _, c := range []int{4, 5, 7, 8, 9, 31, 128, 257} {
		dy, x, w := make([]float32, c), make([]float32, c), make([]float32, c)
		for i := range dy {
			dy[i], x[i], w[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(1+0.1*rng.NormFloat64())
		}
		rstd := 0.7
		dx, pw := make([]float32, c), make([]float64, c)
		for i := range pw {
			pw[i] = float64(i)
		}
		if !rmsBackRow32(dx, pw, dy, x, w, rstd) {
			t.Fatal("did not run")
		}
		var sgx float64
		for j := range x {
			sgx += float64(dy[j]) * float64(w[j]) * float64(x[j])
		}
		k := rstd * rstd * sgx / float64(c)
		for j := range x {
			wantDx := rstd * (float64(dy[j])*float64(w[j]) - float64(x[j])*k)
			wantPw := float64(j) + float64(dy[j])*float64(x[j])*rstd
			if math.Abs(float64(dx[j])-wantDx) > 1e-6*(1+math.Abs(wantDx)) || math.Abs(pw[j]-wantPw) > 1e-12*(1+math.Abs(wantPw)) {
				t.Fatalf("c=%d [%d]: dx %v pw %v, want %v %v", c, j, dx[j], pw[j], wantDx, wantPw)
			}
		}
	}
}
