package profile

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/internal/fmapeak"
)

func TestBenchStatistics(t *testing.T) {
	calls := 0
	r := Bench(func() { calls++ }, BenchOptions{Budget: 20 * ms, Loops: 7, MinRuns: 4})
	if r.Loops != 7 || len(r.Runs) < 4 || r.Warmup < 1 || calls != r.Warmup+7*len(r.Runs) {
		t.Errorf("loops %d, runs %d, warm-up %d, calls %d", r.Loops, len(r.Runs), r.Warmup, calls)
	}
	if !(r.Min <= r.Median && r.Median <= r.Max && r.Min <= r.Mean && r.Mean <= r.Max) {
		t.Errorf("min %v median %v mean %v max %v", r.Min, r.Median, r.Mean, r.Max)
	}
	if s := r.String(); !strings.Contains(s, "per loop (median ± std. dev. of ") || !strings.Contains(s, ", 7 loops each; min ") {
		t.Errorf("String() = %q", s)
	}
	// A slow function still gets MinRuns runs, one call each.
	slow := Bench(func() { time.Sleep(3 * ms) }, BenchOptions{Budget: ms})
	if len(slow.Runs) != 3 || slow.Loops != 1 || slow.Warmup != 1 {
		t.Errorf("slow: %d runs of %d loops after %d warm-up calls", len(slow.Runs), slow.Loops, slow.Warmup)
	}
	if s := slow.String(); !strings.Contains(s, "1 loop each") {
		t.Errorf("String() = %q", s)
	}
}

func TestBenchSummary(t *testing.T) {
	r := BenchResult{Runs: []time.Duration{4, 1, 3, 2}}
	r.summarise()
	if r.Min != 1 || r.Max != 4 || r.Median != 2 || r.Mean != 2 { // (2+3)/2 = 2 in integer ns
		t.Errorf("%+v", r)
	}
	r = BenchResult{Runs: []time.Duration{10 * ms, 12 * ms, 14 * ms}}
	r.summarise()
	if r.Median != 12*ms || r.Std != 2*ms {
		t.Errorf("median %v std %v", r.Median, r.Std)
	}
}

func TestBenchKernels(t *testing.T) {
	opts := BenchOptions{Budget: 10 * ms}
	for _, tc := range []struct {
		name         string
		dims         []int
		flops, bytes int64
		unit         string
	}{
		{"matmul", []int{32, 16, 8}, 2 * 32 * 16 * 8, 4 * (32*8 + 8*16 + 32*16), "GFLOP/s"},
		{"attention", []int{2, 16, 2, 8}, 4 * 4 * 16 * 16 * 8 / 2, 4 * (4*2*2*16*8 + 2*2*16), "GFLOP/s"},
		// The backward also copies dq, dk and dv into the leaves' gradients.
		{"attention+backward", []int{2, 16, 2, 8}, 4 * 4 * 16 * 16 * 8 / 2 * 7 / 2, 4 * (12*2*2*16*8 + 2*2*2*16 + 3*2*2*2*16*8), "GFLOP/s"},
		{"softmax", []int{64, 32}, 4 * 64 * 32, 4 * 2 * 64 * 32, "GB/s"},
		{"rmsnorm", []int{64, 32}, 4 * 64 * 32, 4 * 2 * 64 * 32, "GB/s"}, // forge counts x read and y written
		// The loss is the mean of the rows': a sum (64 read, 1 written) and a scale.
		{"cross_entropy", []int{64, 50}, 3*64*50 + 64 + 1, 4 * (64*50 + 3*64 + 65 + 2), "GB/s"},
		{"copy", []int{1000}, 0, 8000, "GB/s"},
	} {
		r, err := BenchKernelOpts(opts, tc.name, tc.dims...)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if r.FLOPs != tc.flops || r.Bytes != tc.bytes || r.Unit != tc.unit || r.Device != "cpu" || r.Variant == "" {
			t.Errorf("%s: flops %d bytes %d unit %s device %s variant %q; want %d %d %s",
				tc.name, r.FLOPs, r.Bytes, r.Unit, r.Device, r.Variant, tc.flops, tc.bytes, tc.unit)
		}
		if r.Rate() <= 0 || len(r.Runs) < 3 || !strings.HasPrefix(r.String(), tc.name+" ") {
			t.Errorf("%s: rate %v, %d runs, %q", tc.name, r.Rate(), len(r.Runs), r.String())
		}
		if _, err := json.Marshal(r); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	for _, tc := range []struct {
		name string
		dims []int
		err  string
	}{
		{"matmul", []int{4, 4}, "matmul takes 3 sizes (M N K), got 2"},
		{"softmax", []int{4, 0}, "sizes must be positive"},
		{"conv2d", nil, `no kernel benchmark "conv2d" (have matmul, attention`},
		{"step", nil, "BenchStep"},
		{"matmul", []int{1 << 20, 1 << 20, 1 << 20}, "would need 12288.0 GiB of operands (at most 8)"},
		{"copy", []int{1 << 62}, "GiB of operands"},
	} {
		_, err := BenchKernelOpts(opts, tc.name, tc.dims...)
		var bad ArgError
		if !errors.As(err, &bad) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s %v: err %v, want an ArgError %q", tc.name, tc.dims, err, tc.err)
		}
	}
}

func TestBenchKernelDefaults(t *testing.T) {
	k, err := newKernelBench(forge.DefaultDevice(), "attention", nil)
	if err != nil || k.result.Shape != "B16 T128 H4 D32 causal" {
		t.Errorf("default attention: %v, %v", k, err)
	}
}

func TestCalibrateAndCache(t *testing.T) {
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	idle := func() func() float64 { return func() float64 { return 0 } }
	defer func() { watchLoad = otherLoad }()
	watchLoad = idle
	defer func(d time.Duration) { fmaRunTime = d }(fmaRunTime)
	fmaRunTime = 5 * time.Millisecond
	peakMu.Lock()
	peakCache = map[string]*Roofline{}
	p, err := calibrateLocked(forge.DefaultDevice(), 128, 1<<16, 2)
	peakMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if p.Sgemm <= 0 || p.GBps <= 0 || p.SgemmMedian > p.Sgemm || p.GBpsMedian > p.GBps || p.Device != "cpu" || p.CPU == "" || p.Procs < 1 ||
		p.Version != peakVersion || p.Describe != forge.DefaultDevice().Describe() {
		t.Fatalf("peak %+v", p)
	}
	// The FMA loop runs at the widest vectors this CPU runs. The compute
	// roof is the larger of it and the sgemm: on an idle machine the FMA
	// loop's (a 128³ sgemm is far below it), but a 5 ms loop on a busy
	// one may measure below the sgemm, and the roof then says so.
	best := fmapeak.Best()
	if p.FMA <= 0 || p.FMAMedian > p.FMA || p.FMAKernel != best.Name || p.FMAVector != best.Vector ||
		len(p.FMAOther) != len(fmapeak.Kernels())-2 && best.Vector {
		t.Fatalf("FMA peak %+v", p)
	}
	roof := " GFLOP/s FMA (" + best.Name
	if p.FMA >= p.Sgemm {
		if p.Roof != "fma" || p.GFLOPS != p.FMA {
			t.Fatalf("FMA %.1f ≥ sgemm %.1f, but the roof is %s %.1f", p.FMA, p.Sgemm, p.Roof, p.GFLOPS)
		}
	} else {
		if p.Roof != "sgemm" || p.GFLOPS != p.Sgemm {
			t.Fatalf("FMA %.1f < sgemm %.1f, but the roof is %s %.1f", p.FMA, p.Sgemm, p.Roof, p.GFLOPS)
		}
		roof = " GFLOP/s from sgemm (above the FMA loop's "
	}
	for _, want := range []string{"peak ", roof, "% of peak", "\n  device: " + forge.DefaultDevice().Describe()} {
		if !strings.Contains(p.String(), want) {
			t.Errorf("%q lacks %q", p, want)
		}
	}
	t.Logf("small calibration (128³ sgemm, 256 KiB copy): %s", p)
	if KnownPeak("cpu") != p || Peak() != p {
		t.Error("the calibrated peak is not the known one")
	}
	// A new process (empty memory) reads it back from the cache file.
	peakMu.Lock()
	peakCache = map[string]*Roofline{}
	peakMu.Unlock()
	got := KnownPeak("cpu")
	if got == nil || got.GFLOPS != p.GFLOPS || got.GBps != p.GBps || got.key() != p.key() || !got.Measured.Equal(p.Measured) {
		t.Fatalf("cached peak %+v, want %+v", got, p)
	}
	// A file made on another machine (another host or CPU), by an older
	// version whose gflops was the sgemm figure, with other BLAS kernels
	// (another OpenBLAS core) or another worker count, is ignored.
	path, _ := peakPath(p.key())
	anotherHost, anotherCPU, older, otherBLAS, otherProcs := *p, *p, *p, *p, *p
	anotherHost.Host, anotherCPU.CPU, older.Version, otherProcs.Procs = "another-host", "another CPU", 2, p.Procs+1
	otherBLAS.Describe = "cpu: 2 workers, matmul openblas-Haswell: OpenBLAS 0.3.21, Haswell kernels, OPENBLAS_CORETYPE=Haswell (set by the user)"
	for _, other := range []Roofline{anotherHost, anotherCPU, older, otherBLAS, otherProcs} {
		b, _ := json.Marshal(other)
		os.WriteFile(path, b, 0o644)
		peakMu.Lock()
		peakCache = map[string]*Roofline{}
		peakMu.Unlock()
		if KnownPeak("cpu") != nil {
			t.Errorf("a peak with another key was accepted: %s", other.key())
		}
	}
	if KnownPeak("no-such-device") != nil {
		t.Error("a peak for an unknown device")
	}
	// The same conditions on another host name miss the cache: Peak
	// measures for that machine.
	defer func(f func() string) { hostName = f }(hostName)
	hostName = func() string { return "another-host" }
	peakMu.Lock()
	peakCache = map[string]*Roofline{}
	peakMu.Unlock()
	if KnownPeak("cpu") != nil {
		t.Error("the cache of one host answered for another")
	}
}

// TestBusyPeakCachedUntilRecalibrated: a peak measured while other
// processes were busy is cached with its load (a busy machine would
// otherwise pay seconds of calibration in every process), later processes
// take it from the cache without measuring, and only Calibrate measures
// again.
func TestBusyPeakCachedUntilRecalibrated(t *testing.T) {
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	defer func() { watchLoad = otherLoad }()
	defer func(f func() string) { hostName = f }(hostName)
	defer func(d time.Duration) { fmaRunTime = d }(fmaRunTime)
	defer func(n, c, r int) { calibN, calibCopy, calibRuns = n, c, r }(calibN, calibCopy, calibRuns)
	hostName = func() string { return "busy-host" }
	fmaRunTime = 2 * time.Millisecond
	calibN, calibCopy, calibRuns = 64, 1<<12, 1
	measured := 0
	busyBy := 0.5
	watchLoad = func() func() float64 { measured++; b := busyBy; return func() float64 { return b } }
	reset := func() { // a new process: empty memory
		peakMu.Lock()
		peakCache = map[string]*Roofline{}
		peakMu.Unlock()
	}
	reset()
	defer reset()

	p := Peak() // no cache: measures, busy
	if measured != 1 || p.Busy != 0.5 || !strings.Contains(p.String(), "50 % of the CPUs: may be low") || !strings.Contains(p.String(), "Calibrate()") {
		t.Fatalf("first Peak: %d calibrations, %s", measured, p)
	}
	path, _ := peakPath(p.key())
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the busy peak was not cached: %v", err)
	}
	reset()
	q := Peak() // a later process: a cache hit, even though the peak was busy
	if measured != 1 || q == nil || q.Busy != 0.5 || !q.Measured.Equal(p.Measured) || q.Host != "busy-host" {
		t.Fatalf("second Peak: %d calibrations, %+v", measured, q)
	}
	busyBy = 0
	r, err := Calibrate() // on request: measures again and replaces the cache
	if err != nil || measured != 2 || r.Busy != 0 || strings.Contains(r.String(), "may be low") {
		t.Fatalf("Calibrate: %v, %d calibrations, %s", err, measured, r)
	}
	reset()
	if s := Peak(); measured != 2 || s.Busy != 0 {
		t.Fatalf("after Calibrate: %d calibrations, busy %v; want the recalibrated peak from the cache", measured, s.Busy)
	}
}

func TestKernelOnRoofline(t *testing.T) {
	k := KernelResult{Device: "cpu", FLOPs: 2e9, Bytes: 1e7, BenchResult: BenchResult{Median: 40 * ms}}
	bound, att, pct := k.OnRoofline(&Roofline{Device: "cpu", GFLOPS: 100, GBps: 10})
	if bound != "compute" || att != 100 || !near(pct, 0.5) { // 2e9 / 100e9 = 20 ms of 40
		t.Errorf("%s %v %v", bound, att, pct)
	}
	if bound, _, _ := k.OnRoofline(nil); bound != "" {
		t.Errorf("no peak: %q", bound)
	}
}
