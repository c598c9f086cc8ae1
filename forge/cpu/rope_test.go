package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// rkRefRoPE rotates the interleaved pairs of x (n, t, d) in float64, pair k
// at position p by (pos0+p)·θ^(−2k/D), the frequency written as
// exp(−(2k/D)·ln θ); sign −1 rotates backwards.
func rkRefRoPE(x []float64, n, t, d, pos0 int, theta, sign float64) []float64 {
	y := make([]float64, len(x))
	for i := 0; i < n; i++ {
		for p := 0; p < t; p++ {
			row := (i*t + p) * d
			for k := 0; k < d/2; k++ {
				ang := sign * float64(pos0+p) * math.Exp(-float64(2*k)/float64(d)*math.Log(theta))
				c, s := math.Cos(ang), math.Sin(ang)
				a, b := x[row+2*k], x[row+2*k+1]
				y[row+2*k] = a*c - b*s
				y[row+2*k+1] = a*s + b*c
			}
		}
	}
	return y
}

type rkRoPECase struct {
	n, t, d, pos0 int
	theta         float64
}

func (c rkRoPECase) String() string {
	return fmt.Sprintf("N=%d T=%d D=%d pos0=%d θ=%g", c.n, c.t, c.d, c.pos0, c.theta)
}

func rkRoPECases() []rkRoPECase {
	var cs []rkRoPECase
	for _, d := range []int{2, 6, 64, 130} {
		for _, t := range []int{1, 5, 33} {
			for _, n := range []int{1, 3, 4*minGrain/(t*d) + 1} {
				cs = append(cs, rkRoPECase{n, t, d, 0, 10000})
			}
		}
	}
	return append(cs,
		rkRoPECase{2, 7, 16, 7, 10000},
		rkRoPECase{2, 3, 64, 100000, 10000}, // long-context positions
		rkRoPECase{4, 9, 32, 3, 500000},
		rkRoPECase{3, 1, 128, 4095, 10000}) // one-token decode step
}

func TestRoPE(t *testing.T) {
	b := rkBackend(0)
	rng := rand.New(rand.NewPCG(21, 22))
	worst := rkWorst{}
	for _, c := range rkRoPECases() {
		shape := []int{c.n, c.t, c.d}
		x := rkNormal(rng, c.n*c.t*c.d, 1, 0)
		for _, inverse := range []bool{false, true} {
			sign := 1.0
			if inverse {
				sign = -1
			}
			want := rkRefRoPE(x, c.n, c.t, c.d, c.pos0, c.theta, sign)
			for _, dt := range rkDTypes {
				yv := rkView(dt, shape, nil)
				b.RoPE(yv, rkView(dt, shape, x), c.pos0, c.theta, inverse)
				rkCheckPads(t, "rope", yv)
				// The reference's exp(−2k/D·ln θ) and the kernel's θ^(−2k/D)
				// differ in their last bits, an error the angle multiplies:
				// up to 1e5 here. Values are N(0,1); entries below 0.1 are
				// compared against 0.1.
				tol := 1e-13 * float64(max(1, c.pos0+c.t))
				if dt == backend.Float32 {
					tol = 1e-6
				}
				e := rkRelErr(rkRead(yv), want, 0.1)
				name := fmt.Sprintf("rope inverse=%v %v", inverse, dt)
				worst.add(name, e)
				if e > tol {
					t.Errorf("%s %v: relative error %.3g > %.g", name, c, e, tol)
				}
			}
		}
		// The inverse undoes the forward, also in place (y = x).
		v := rkView(backend.Float64, shape, x)
		b.RoPE(v, v, c.pos0, c.theta, false)
		b.RoPE(v, v, c.pos0, c.theta, true)
		e := rkRelErr(rkRead(v), x, 0.1)
		worst.add("rope round trip in place", e)
		if e > 1e-14 {
			t.Errorf("rope %v: inverse(forward(x)) differs from x by %.3g", c, e)
		}
	}
	worst.log(t)
}

// TestRoPEBackward checks that the inverse rotation is the gradient: for
// L = Σ g·RoPE(x), ∂L/∂x = RoPE⁻¹(g), by finite differences of the float64
// forward.
func TestRoPEBackward(t *testing.T) {
	b := rkBackend(0)
	rng := rand.New(rand.NewPCG(23, 24))
	worst := 0.0
	for _, c := range []rkRoPECase{{1, 1, 2, 0, 10000}, {2, 5, 6, 3, 10000}, {3, 4, 34, 11, 10000}, {1, 3, 8, 50000, 500000}} {
		shape := []int{c.n, c.t, c.d}
		x, g := rkNormal(rng, c.n*c.t*c.d, 1, 0), rkNormal(rng, c.n*c.t*c.d, 1, 0)
		dxv := rkView(backend.Float64, shape, nil)
		b.RoPE(dxv, rkView(backend.Float64, shape, g), c.pos0, c.theta, true)
		e := rkFDErr(rkRead(dxv), x, nil, 0, func() (float64, float64) {
			yv := rkView(backend.Float64, shape, nil)
			b.RoPE(yv, rkView(backend.Float64, shape, x), c.pos0, c.theta, false)
			return rkDotAbs(rkRead(yv), g)
		})
		worst = max(worst, e)
		if e > 1e-6 {
			t.Errorf("rope backward %v: finite-difference relative error %.3g", c, e)
		}
	}
	t.Logf("worst rope backward vs finite differences %.3g", worst)
}

// TestRoPECache interleaves more distinct (T, D, pos0, θ) keys than the
// cache holds, from several goroutines, and checks every result.
func TestRoPECache(t *testing.T) {
	b := rkBackend(2)
	rng := rand.New(rand.NewPCG(25, 26))
	const n, tt, d = 2, 3, 8
	x := rkNormal(rng, n*tt*d, 1, 0)
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for gi := 0; gi < 4; gi++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := 0; it < 3*ropeCacheSize; it++ {
				pos0 := (it*7 + gi) % (2*ropeCacheSize + 1)
				theta := []float64{10000, 500000}[it%2]
				want := rkRefRoPE(x, n, tt, d, pos0, theta, 1)
				yv := rkView(backend.Float64, []int{n, tt, d}, nil)
				b.RoPE(yv, rkView(backend.Float64, []int{n, tt, d}, x), pos0, theta, false)
				if e := rkRelErr(rkRead(yv), want, 1e-3); e > 1e-12 {
					errs <- fmt.Sprintf("pos0=%d θ=%g: relative error %.3g", pos0, theta, e)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	ropeCache.Lock()
	defer ropeCache.Unlock()
	if len(ropeCache.tables) > ropeCacheSize {
		t.Errorf("cache holds %d tables, limit %d", len(ropeCache.tables), ropeCacheSize)
	}
}

func TestRoPEOddDimensionPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("RoPE with D=5 did not panic")
		}
	}()
	v := rkView(backend.Float32, []int{1, 2, 5}, nil)
	rkBackend(1).RoPE(v, v, 0, 10000, false)
}

func BenchmarkRoPEF32(bb *testing.B) {
	b := New()
	rng := rand.New(rand.NewPCG(27, 28))
	shape := []int{4 * 6, 256, 64} // B·H, T, D
	n := 4 * 6 * 256 * 64
	x, y := rkView(backend.Float32, shape, rkNormal(rng, n, 1, 0)), rkView(backend.Float32, shape, nil)
	bb.SetBytes(int64(2 * 4 * n))
	for bb.Loop() {
		b.RoPE(y, x, 0, 10000, false)
	}
}

// TestRoPEStrided: RoPEStrided on a permuted view (the q of a fused
// (B, T, 3, H, D) projection seen as (B, H, T, D)) gives bit for bit what
// RoPE gives on a contiguous copy, forward and inverse, for any workers.
func TestRoPEStrided(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []backend.DType{backend.Float32, backend.Float64} {
		for _, c := range []struct{ b, tt, h, d int }{{2, 5, 3, 8}, {3, 33, 4, 32}, {1, 1, 1, 2}, {4, 64, 2, 64}} {
			for _, inverse := range []bool{false, true} {
				for _, workers := range []int{1, 2, 3} {
					be := rkBackend(workers)
					n := c.b * c.tt * 3 * c.h * c.d
					all := rkView(dt, []int{c.b, c.tt, 3, c.h, c.d}, rkNormal(rng, n, 1, 0))
					// index 1 of axis 2, permuted to (B, H, T, D)
					x := backend.View{Buf: all.Buf, Offset: all.Offset + c.h*c.d,
						Shape:   []int{c.b, c.h, c.tt, c.d},
						Strides: []int{c.tt * 3 * c.h * c.d, c.d, 3 * c.h * c.d, 1}}
					shape := []int{c.b * c.h, c.tt, c.d}
					xc := rkView(dt, shape, nil)
					be.Copy(backend.View{Buf: xc.Buf, Offset: xc.Offset, Shape: x.Shape, Strides: backend.ContiguousStrides(x.Shape)}, x)
					want, got := rkView(dt, shape, nil), rkView(dt, x.Shape, nil)
					be.RoPE(want, xc, 3, 10000, inverse)
					be.RoPEStrided(got, x, 3, 10000, inverse)
					w, g := rkRead(want), rkRead(got)
					for i := range w {
						if w[i] != g[i] {
							t.Fatalf("%v %+v inverse=%v workers=%d: element %d = %v, contiguous RoPE %v", dt, c, inverse, workers, i, g[i], w[i])
						}
					}
				}
			}
		}
	}
}
