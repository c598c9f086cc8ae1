package emu

import (
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/metal/driver"
)

// TestConcurrentRegionOrder: the dispatches of a concurrent region between
// barriers run in the schedule's order (reversed under Reverse), so that
// a result that depends on their order shows; across a barrier, and
// outside a region, the encoding order holds under every schedule.
func TestConcurrentRegionOrder(t *testing.T) {
	d := testDriver(t)
	defer d.SetSchedule(Forward, 0)
	p := pipe(t, d, "add_scaled")
	const n = 8
	params := append(u32bytes(n), f32bytes(1)...)
	one := f32buf(t, d, slices.Repeat([]float32{1}, n))
	zero := f32buf(t, d, make([]float32, n))
	// out = src + 1 for each step; step k reads what step k-1 wrote, so
	// only the encoding order gives 3 after three steps from 0.
	chain := func(region, barriers bool) float32 {
		a, b := f32buf(t, d, make([]float32, n)), f32buf(t, d, make([]float32, n))
		cb := d.NewCommandBuffer().(driver.ConcurrentCommandBuffer)
		if region {
			cb.BeginConcurrent()
		}
		cb.Encode(dispatch(p, [3]int{1, 1, 1}, [3]int{n, 1, 1}, bufArg(zero), bufArg(one), bufArg(a), bytesArg(params)))
		if barriers {
			cb.Barrier()
		}
		cb.Encode(dispatch(p, [3]int{1, 1, 1}, [3]int{n, 1, 1}, bufArg(a), bufArg(one), bufArg(b), bytesArg(params)))
		if barriers {
			cb.Barrier()
		}
		cb.Encode(dispatch(p, [3]int{1, 1, 1}, [3]int{n, 1, 1}, bufArg(b), bufArg(one), bufArg(a), bytesArg(params)))
		if region {
			cb.EndConcurrent()
		}
		cb.Commit()
		if err := cb.Wait(); err != nil {
			if region && !barriers && strings.Contains(err.Error(), "concurrent region") {
				return -1 // refused: see below
			}
			t.Fatal(err)
		}
		return f32s(a)[0]
	}
	for _, s := range []Schedule{Forward, Reverse, Random} {
		d.SetSchedule(s, 7)
		if got := chain(false, false); got != 3 {
			t.Errorf("%v: serial chain gave %v, want 3", s, got)
		}
		if got := chain(true, true); got != 3 {
			t.Errorf("%v: chain with barriers in a region gave %v, want 3", s, got)
		}
		if got := chain(true, false); got != -1 {
			t.Errorf("%v: a region whose dispatches depend on each other ran (gave %v); want it refused", s, got)
		}
	}
	// Independent dispatches in a region: reversed order, same result;
	// the order really is reversed (a dispatch writing one buffer twice
	// would be refused, so observe it through the rounds instead).
	d.SetSchedule(Reverse, 0)
	cb := d.NewCommandBuffer().(*cmdBuf)
	cb.Encode(dispatch(p, [3]int{1, 1, 1}, [3]int{n, 1, 1}, bufArg(zero), bufArg(one), bufArg(zero), bytesArg(params)))
	cb.BeginConcurrent()
	for range 3 {
		cb.Encode(dispatch(p, [3]int{1, 1, 1}, [3]int{n, 1, 1}, bufArg(zero), bufArg(one), bufArg(f32buf(t, d, make([]float32, n))), bytesArg(params)))
	}
	cb.Barrier()
	cb.Encode(dispatch(p, [3]int{1, 1, 1}, [3]int{n, 1, 1}, bufArg(zero), bufArg(one), bufArg(f32buf(t, d, make([]float32, n))), bytesArg(params)))
	cb.Encode(dispatch(p, [3]int{1, 1, 1}, [3]int{n, 1, 1}, bufArg(zero), bufArg(one), bufArg(f32buf(t, d, make([]float32, n))), bytesArg(params)))
	cb.EndConcurrent()
	if got, want := cb.order(Reverse, 0), []int{0, 3, 2, 1, 5, 4}; !slices.Equal(got, want) {
		t.Errorf("reverse order %v, want %v", got, want)
	}
	if got := cb.order(Forward, 0); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) {
		t.Errorf("forward order %v", got)
	}
	// (the first dispatch writes zero, which the region's read: it is
	// outside the region, so nothing is refused)
	cb.Commit()
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentRegionMisuse: unbalanced region calls panic.
func TestConcurrentRegionMisuse(t *testing.T) {
	d := testDriver(t)
	for name, f := range map[string]func(cb driver.ConcurrentCommandBuffer){
		"barrier outside": func(cb driver.ConcurrentCommandBuffer) { cb.Barrier() },
		"end outside":     func(cb driver.ConcurrentCommandBuffer) { cb.EndConcurrent() },
		"begin twice":     func(cb driver.ConcurrentCommandBuffer) { cb.BeginConcurrent(); cb.BeginConcurrent() },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f(d.NewCommandBuffer().(driver.ConcurrentCommandBuffer))
		}()
	}
}
