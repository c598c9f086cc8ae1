package emu

import (
	"math"
	"testing"
)

// TestSIMDOps checks simd_sum/max/min/prefix sums/shuffle/shuffle_xor/
// broadcast/shuffle_down against Go loops, with threadgroups of 80 threads
// (two full simdgroups and a partial one of 16 lanes).
func TestSIMDOps(t *testing.T) {
	d := testDriver(t)
	const groups, tg = 2, 80
	n := groups * tg
	x := make([]float32, n)
	for i := range x {
		x[i] = float32((i*37)%101) - 50 + 0.25
	}
	bx := f32buf(t, d, x)
	p := pipe(t, d, "simd_ops")
	withSchedules(d, func(sched string) {
		out := f32buf(t, d, make([]float32, 9*n))
		if err := run(d, p, [3]int{groups, 1, 1}, [3]int{tg, 1, 1}, bufArg(bx), bufArg(out)); err != nil {
			t.Fatal(err)
		}
		got := f32s(out)
		for g := 0; g < groups; g++ {
			for s := 0; s*32 < tg; s++ {
				base := g*tg + s*32
				m := min(32, tg-s*32) // lanes in this simdgroup
				v := x[base : base+m]
				var sum float32
				mx, mn := v[0], v[0]
				for _, e := range v {
					sum += e
					mx = max(mx, e)
					mn = min(mn, e)
				}
				src := func(l, s int) float32 {
					if s < 0 || s >= m {
						return v[l]
					}
					return v[s]
				}
				var run float32
				for l := 0; l < m; l++ {
					o := got[9*(base+l):]
					excl := run
					run += v[l]
					want := []float32{sum, mx, mn, run, excl, src(l, (l*7+3)&31), src(l, l^5), src(l, 2), src(l, l+3)}
					for k, w := range want {
						if o[k] != w && !(math.Abs(float64(o[k]-w)) < 1e-4) {
							t.Fatalf("%s: group %d simdgroup %d lane %d op %d: got %v, want %v", sched, g, s, l, k, o[k], w)
						}
					}
				}
			}
		}
	})
}

// TestSIMDMore: ballot, any, all, shuffle_up, quad_sum, broadcast_first,
// is_first, and simd_sum over the active lanes of a branch, with a partial
// last simdgroup (threadgroups of 50).
func TestSIMDMore(t *testing.T) {
	d := testDriver(t)
	const tg = 50
	x := make([]float32, tg)
	for i := range x {
		x[i] = float32((i*29)%83) - 41
	}
	bx := f32buf(t, d, x)
	withSchedules(d, func(sched string) {
		out := f32buf(t, d, make([]float32, 8*tg))
		if err := run(d, pipe(t, d, "simd_more"), [3]int{1, 1, 1}, [3]int{tg, 1, 1}, bufArg(bx), bufArg(out)); err != nil {
			t.Fatal(err)
		}
		got := f32s(out)
		for s := 0; s*32 < tg; s++ {
			base, m := s*32, min(32, tg-s*32)
			v := x[base : base+m]
			var ballot uint32
			anyBig, allOK := false, true
			var sum3 float32
			firstOther := float32(0)
			for l := m - 1; l >= 0; l-- {
				if l%3 != 0 {
					firstOther = v[l]
				}
			}
			for l, e := range v {
				if e > 0 {
					ballot |= 1 << l
				}
				anyBig = anyBig || e > 40
				allOK = allOK && e > -40
				if l%3 == 0 {
					sum3 += e
				}
			}
			b2f := func(b bool) float32 {
				if b {
					return 1
				}
				return 0
			}
			for l := 0; l < m; l++ {
				up := v[l]
				if l >= 2 {
					up = v[l-2]
				}
				var quad float32
				for k := l &^ 3; k < l&^3+4 && k < m; k++ {
					quad += v[k]
				}
				want := []float32{float32(ballot % 65521), b2f(anyBig), b2f(allOK), up, quad, -1, firstOther, b2f(l == 0)}
				if l%3 == 0 {
					want[5] = sum3
					want[6] = v[0]
				}
				o := got[8*(base+l):]
				for k, w := range want {
					if o[k] != w {
						t.Fatalf("%s: simdgroup %d lane %d value %d: got %v, want %v", sched, s, l, k, o[k], w)
					}
				}
			}
		}
	})
}

// TestEarlyExitBarrier: a barrier completes when every thread that has
// not returned reached it.
func TestEarlyExitBarrier(t *testing.T) {
	d := testDriver(t)
	withSchedules(d, func(sched string) {
		out := f32buf(t, d, make([]float32, 64))
		if err := run(d, pipe(t, d, "early_exit"), [3]int{1, 1, 1}, [3]int{64, 1, 1}, bufArg(out), bytesArg(u32bytes(40))); err != nil {
			t.Fatal(err)
		}
		for i, v := range f32s(out) {
			want := float32(0)
			if i < 40 {
				want = float32(39 - i)
			}
			if v != want {
				t.Fatalf("%s: out[%d] = %v, want %v", sched, i, v, want)
			}
		}
	})
	out := f32buf(t, d, make([]float32, 4))
	if err := run(d, pipe(t, d, "attr_spelling"), [3]int{1, 1, 1}, [3]int{4, 1, 1}, bufArg(out)); err != nil || f32s(out)[3] != 7 {
		t.Errorf("[[kernel]] spelling: %v %v", err, f32s(out))
	}
}
