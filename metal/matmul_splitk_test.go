package metal

// Split-K matmul against the CPU backend on the emulator: shapes the rule
// splits (dW-like: few output tiles, long K), every operand layout, with
// and without accumulation; exactly on integer-valued operands (every
// product and sum is exact in float32, so a chunk of K dropped, doubled or
// cut at the wrong place shows as a wrong integer), within a tolerance on
// normal ones, and bit for bit across thread schedules.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/metal/emu"
)

// splitShapes are products the rule splits on the emulator (no GPUCores:
// G = 64 threadgroups): square and odd tiles, K a multiple of the chunk
// step or not, a partial last chunk.
var splitShapes = []struct{ m, n, k int }{
	{64, 64, 4096}, // 4 tiles, 16 splits of 256
	{45, 70, 1000}, // 6 tiles, edges on M and N, K not a multiple of 16
	{8, 200, 3000}, // one tile row
	{33, 17, 777},  // 2 tiles, 1-element edges
	{32, 32, 300},  // one aligned tile, short K: 2 splits
}

func TestSplitKPlan(t *testing.T) {
	b := opsDevice(t)
	for _, s := range splitShapes {
		n, chunk := b.splitKPlan(s.m, s.n, s.k)
		if n < 2 || chunk%mmBK != 0 || (n-1)*chunk >= s.k || n*chunk < s.k {
			t.Errorf("%d×%d×%d: %d splits of %d: want ≥ 2 non-empty chunks of whole %d-steps covering K", s.m, s.n, s.k, n, chunk, mmBK)
		}
		if n > mmSplitMax || chunk < mmSplitMinSteps*mmBK {
			t.Errorf("%d×%d×%d: %d splits of %d break the caps", s.m, s.n, s.k, n, chunk)
		}
	}
	// Not split: enough tiles already, short K, square-ish small, and
	// the switch.
	for _, s := range []struct{ m, n, k int }{{256, 256, 4096}, {64, 64, 100}, {64, 64, 127}, {200, 200, 256}} {
		if n, _ := b.splitKPlan(s.m, s.n, s.k); n != 1 {
			t.Errorf("%d×%d×%d: %d splits, want none", s.m, s.n, s.k, n)
		}
	}
	noSplitK.Store(true)
	if n, _ := b.splitKPlan(64, 64, 4096); n != 1 {
		t.Errorf("nosplit: %d splits", n)
	}
	noSplitK.Store(false)
}

func TestMatMulSplitK(t *testing.T) {
	e := newOpsEnv(t)
	ints := func(int) float64 { return float64(e.rng.IntN(7) - 3) } // |Σ| ≤ 9K < 2^24: exact
	for _, s := range splitShapes {
		for _, ta := range []bool{true, false} {
			for _, tb := range []bool{false, true} {
				for _, acc := range []bool{false, true} {
					name := fmt.Sprintf("%dx%dx%d %s acc=%v", s.m, s.n, s.k, layoutTag(ta, tb), acc)
					// Integer operands: exact on both devices.
					a := e.newPair(backend.Float32, mmOperand(nil, nil, s.m, s.k, ta, 3), ints)
					b := e.newPair(backend.Float32, mmOperand(nil, nil, s.k, s.n, tb, 1), ints)
					c := e.newPair(backend.Float32, contig(s.m, s.n), ints)
					before := e.dev.StreamStats().Dispatches
					e.both(func(be backend.Backend, v func(pair) backend.View) { be.MatMul(v(c), v(a), v(b), acc) })
					if d := e.dev.StreamStats().Dispatches - before; d != 2 {
						t.Errorf("%s: %d dispatches, want 2 (split + reduce)", name, d)
					}
					e.compare(name+" integers", c, 0)
					// Normal operands: float32 rounding, in another order
					// than the CPU's.
					a = e.newPair(backend.Float32, mmOperand(nil, nil, s.m, s.k, ta, 3), e.normal)
					b = e.newPair(backend.Float32, mmOperand(nil, nil, s.k, s.n, tb, 1), e.normal)
					c = e.newPair(backend.Float32, contig(s.m, s.n), e.normal)
					e.both(func(be backend.Backend, v func(pair) backend.View) { be.MatMul(v(c), v(a), v(b), acc) })
					e.compare(name+" normal", c, splitTol(s.k))
				}
			}
		}
	}
}

// splitTol is the tolerance of a float32 product over K normal terms
// against the CPU's: |got − want| ≤ tol·max(1, |want|). The rounding
// errors of two float32 sums of K terms of size ~1 differ by about
// √K·2⁻²⁴·√K; 8× that.
func splitTol(k int) float64 { return max(opsTol, 8*float64(k)*math.Pow(2, -24)) }

// TestMatMulSplitKSchedules requires split-K results (partials and the
// ordered reduction) to be the same bits under every thread schedule.
func TestMatMulSplitKSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	const m, n, k = 45, 70, 1000
	rng := rand.New(rand.NewPCG(5, 6))
	host := make([]float32, m*k+k*n+m*n)
	for i := range host {
		host[i] = float32(rng.NormFloat64())
	}
	run := func() []float32 {
		buf := e.dev.Alloc(backend.Float32, len(host))
		e.dev.Write(buf, host)
		a := backend.View{Buf: buf, Shape: []int{m, k}, Strides: []int{1, m}} // xᵀ: column-major
		bm := backend.View{Buf: buf, Offset: m * k, Shape: []int{k, n}, Strides: []int{n, 1}}
		c := backend.View{Buf: buf, Offset: m*k + k*n, Shape: []int{m, n}, Strides: []int{n, 1}}
		e.dev.MatMul(c, a, bm, true)
		out := make([]float32, len(host))
		e.dev.Read(buf, out)
		return out[m*k+k*n:]
	}
	drv.SetSchedule(emu.Forward, 0)
	want := run()
	for _, s := range []struct {
		s    emu.Schedule
		seed uint64
	}{{emu.Reverse, 0}, {emu.Random, 1}, {emu.Random, 2}} {
		drv.SetSchedule(s.s, s.seed)
		got := run()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("schedule %v seed %d: element %d: %g, forward gives %g", s.s, s.seed, i, got[i], want[i])
			}
		}
	}
}
