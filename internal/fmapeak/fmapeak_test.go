package fmapeak

import (
	"math"
	"runtime"
	"testing"
	"time"
)

// Every kernel's loop converges to the value its recurrence predicts, so
// the assembly really ran its chains the number of times asked.
func TestKernelsCompute(t *testing.T) {
	ks := Kernels()
	if len(ks) == 0 || ks[len(ks)-1].Name != "go-scalar" || ks[len(ks)-1].Vector {
		t.Fatalf("kernels %v: the portable loop must come last", ks)
	}
	m, c := float64(fmaConsts[0]), float64(fmaConsts[1])
	for _, k := range ks {
		steps := k.perIter / k.Chains // chain steps per iteration
		for _, n := range []int{0, 1, 7, 1000} {
			got := float64(k.run(n))
			var acc float64
			if runtime.GOARCH == "arm64" && k.Vector {
				acc = c + float64(n*steps)*m*c // acc += mul·add
			} else {
				acc = c
				for range n * steps {
					acc = acc*m + c
				}
			}
			want := acc * float64(k.Chains*k.Lanes)
			if k.Name == "go-scalar" {
				want = acc * 8
			}
			if math.Abs(got-want) > 1e-4*math.Abs(want)+1e-9 {
				t.Errorf("%s, %d iterations: sum %g, want %g", k.Name, n, got, want)
			}
		}
	}
}

func TestMeasure(t *testing.T) {
	for _, k := range Kernels() {
		r := Measure(k, 0, 50*time.Millisecond)
		if r.GFLOPS <= 0 || r.Workers != runtime.GOMAXPROCS(0) || r.Elapsed < 50*time.Millisecond || r.Kernel != k.Name {
			t.Errorf("%s: %+v", k, r)
		}
		t.Logf("%s: %.1f GFLOP/s on %d workers", k, r.GFLOPS, r.Workers)
	}
}
