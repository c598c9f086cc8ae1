// Package fmapeak measures a CPU's float32 fused multiply-add throughput:
// the compute limit of the hardware, as opposed to what any one kernel
// (an sgemm) reaches on it.
//
// Each kernel is a loop of independent FMA chains at one vector width,
// written in assembly so that nothing but the FMAs (and one counter
// decrement and branch per iteration) runs: enough chains to cover the FMA
// latency times the number of FMA pipes (12 on x86-64: 4 cycles × 2 pipes
// need 8; 24 on arm64, where Apple's cores have 4 pipes). Measure runs a
// kernel on several workers at once (one goroutine locked to its thread
// each) for a fixed time and reports float32 GFLOP/s, 2 FLOPs per lane of
// every FMA.
//
// Kernels lists what this CPU and its OS can run, widest first:
// "avx512-zmm" (AVX-512F with the OS saving the ZMM state), "avx2-ymm"
// (AVX2 and FMA), "neon-q" (arm64's 128-bit FMLA), and on every platform
// "go-scalar", a portable Go loop of scalar multiply-adds whose figure is
// the compiler's, not the vector units' (Vector false): honest about what
// it measured, never a hardware peak.
package fmapeak

import (
	"fmt"
	"runtime"
	"sync"
	"time"
)

// Kernel is one FMA loop.
type Kernel struct {
	Name   string // "avx512-zmm", "avx2-ymm", "neon-q" or "go-scalar"
	Lanes  int    // float32 lanes of one vector
	Chains int    // independent accumulators
	// Vector is whether the loop runs the hardware's vector FMAs; false
	// for the portable Go fallback.
	Vector bool
	// perIter is the FMA instructions of one loop iteration.
	perIter int
	// run executes n iterations and returns the sum of the accumulators'
	// lanes (about Chains·Lanes; a check that the loop ran).
	run func(n int) float32
}

// FLOPsPerIter is the float32 operations of one loop iteration: two per
// lane of each FMA.
func (k Kernel) FLOPsPerIter() float64 { return float64(2 * k.perIter * k.Lanes) }

// String describes the kernel, e.g. "avx512-zmm (16 lanes, 12 chains)".
func (k Kernel) String() string {
	s := fmt.Sprintf("%s (%d lanes, %d chains)", k.Name, k.Lanes, k.Chains)
	if !k.Vector {
		s += ", portable Go: not the vector units' peak"
	}
	return s
}

// Kernels returns the FMA loops this CPU and OS can run, widest vectors
// first; the last is always the portable Go loop.
func Kernels() []Kernel { return append(vectorKernels(), scalarKernel) }

// Best returns the widest kernel this machine runs (the first of Kernels).
func Best() Kernel { return Kernels()[0] }

// Result is one measurement.
type Result struct {
	Kernel  string        `json:"kernel"`
	Vector  bool          `json:"vector"`
	Workers int           `json:"workers"`
	GFLOPS  float64       `json:"gflops"`  // float32 GFLOP/s of all workers together
	Elapsed time.Duration `json:"elapsed"` // wall time of the measurement
}

// Measure runs k on workers goroutines at once (each locked to its OS
// thread; workers ≤ 0 means GOMAXPROCS) for about d and returns their
// combined float32 GFLOP/s: the operations done by all of them divided by
// the wall time from the common start until the last one stopped.
func Measure(k Kernel, workers int, d time.Duration) Result {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	n := chunk(k)
	var (
		wg    sync.WaitGroup
		ready sync.WaitGroup
		start = make(chan struct{})
		iters = make([]int64, workers)
		ends  = make([]time.Time, workers)
		t0    time.Time
	)
	ready.Add(workers)
	wg.Add(workers)
	for w := range workers {
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			k.run(n) // warm up: caches, clocks, the upper vector halves
			ready.Done()
			<-start
			deadline := t0.Add(d)
			var done int64
			for {
				k.run(n)
				done += int64(n)
				if now := time.Now(); !now.Before(deadline) {
					ends[w] = now
					break
				}
			}
			iters[w] = done
		}()
	}
	ready.Wait()
	t0 = time.Now()
	close(start)
	wg.Wait()
	var total int64
	last := t0
	for w := range workers {
		total += iters[w]
		if ends[w].After(last) {
			last = ends[w]
		}
	}
	el := last.Sub(t0)
	return Result{
		Kernel: k.Name, Vector: k.Vector, Workers: workers, Elapsed: el,
		GFLOPS: float64(total) * k.FLOPsPerIter() / el.Seconds() / 1e9,
	}
}

// chunk picks the iterations of one call so that it lasts about 2 ms: short
// against the measurement, long against a clock read.
func chunk(k Kernel) int {
	n := 1 << 10
	for {
		t := time.Now()
		k.run(n)
		if el := time.Since(t); el > 200*time.Microsecond || n >= 1<<30 {
			return max(1, int(float64(n)*float64(2*time.Millisecond)/float64(max(el, 1))))
		}
		n *= 4
	}
}

// The constants of the loops: {mul, add, 1, 0}. On x86-64 every chain is
// acc = acc·mul + add, which converges to 1 and stays a normal number
// however long it runs; on arm64 acc += mul·add (see fma_arm64.s).
var fmaConsts = [4]float32{0.99999, 0.00001, 1, 0}

// scalarKernel is the portable fallback: eight scalar chains in Go. On
// arm64 the compiler fuses each line into one FMADD; on amd64 it issues a
// multiply and an add. Either way, not the vector units.
var scalarKernel = Kernel{Name: "go-scalar", Lanes: 1, Chains: 8, perIter: 8, run: scalarFMA}

func scalarFMA(n int) float32 {
	m, c := fmaConsts[0], fmaConsts[1]
	a0, a1, a2, a3, a4, a5, a6, a7 := c, c, c, c, c, c, c, c
	for range n {
		a0 = a0*m + c
		a1 = a1*m + c
		a2 = a2*m + c
		a3 = a3*m + c
		a4 = a4*m + c
		a5 = a5*m + c
		a6 = a6*m + c
		a7 = a7*m + c
	}
	return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7
}
