package profile

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/forgeml/forge/forge"
)

// TestMain points the peak cache at a temporary directory, so no test reads
// or writes the user's cache.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "forge-profile-test")
	if err != nil {
		panic(err)
	}
	os.Setenv("FORGE_CACHE_DIR", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const ms = time.Millisecond

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// call is a synthetic kernel call starting at offset `at` after t0.
func call(kernel, variant string, ph forge.Phase, at, d time.Duration, flops, bytes int64, shapes ...[]int) forge.KernelCall {
	return forge.KernelCall{
		Kernel: kernel, Variant: variant, Device: "test", DType: forge.Float32, Shapes: shapes,
		Phase: ph, FLOPs: flops, Bytes: bytes, Start: t0.Add(at), Duration: d,
	}
}

var (
	shapeA = [][]int{{64, 32}, {32, 16}, {64, 16}}
	shapeB = [][]int{{32, 64}, {64, 16}, {32, 16}}
)

// synthetic is a 25 ms recording with 19 ms of kernels:
//
//	matmul A  forward   2, 3, 4 ms   2 GFLOP, 1 MB each
//	copy      forward   1, 1 ms      1 MB each, no FLOPs
//	matmul B  backward  6 ms         2 GFLOP, 1 MB
//	adamw     optimizer 2 ms         1 MFLOP, 4 MB
func synthetic() *Profile {
	return FromCalls(t0, 25*ms,
		call("matmul", "blas", forge.PhaseForward, 0, 2*ms, 2e9, 1e6, shapeA...),
		call("copy", "go", forge.PhaseForward, 2*ms, 1*ms, 0, 1e6, []int{8}, []int{8}),
		call("matmul", "blas", forge.PhaseForward, 4*ms, 3*ms, 2e9, 1e6, shapeA...),
		call("copy", "go", forge.PhaseForward, 7*ms, 1*ms, 0, 1e6, []int{8}, []int{8}),
		call("matmul", "blas", forge.PhaseForward, 8*ms, 4*ms, 2e9, 1e6, shapeA...),
		call("matmul", "blas", forge.PhaseBackward, 14*ms, 6*ms, 2e9, 1e6, shapeB...),
		call("adamw", "go", forge.PhaseOptimizer, 21*ms, 2*ms, 1e6, 4e6, []int{10}),
	)
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestReportTotalsSharesRates(t *testing.T) {
	r := synthetic().Report(ReportOptions{})
	if r.Wall != 25*ms || r.Kernel != 19*ms || r.Outside != 6*ms || r.Calls != 7 || !near(r.KernelShare, 19.0/25) {
		t.Fatalf("wall %v kernel %v outside %v calls %v share %v", r.Wall, r.Kernel, r.Outside, r.Calls, r.KernelShare)
	}
	if len(r.Rows) != 4 || r.Peak != nil {
		t.Fatalf("%d rows (want 4), peak %v", len(r.Rows), r.Peak)
	}
	a := r.Rows[0]
	if a.Kernel != "matmul" || a.Variant != "blas" || a.Shape != "(64,32) (32,16) (64,16)" {
		t.Fatalf("first row %+v", a)
	}
	if a.Calls != 3 || a.Total != 9*ms || a.Mean != 3*ms || a.Min != 2*ms || a.Max != 4*ms || !near(a.Share, 9.0/19) {
		t.Errorf("matmul A: %+v", a)
	}
	if !near(a.GFLOPS, 6e9/0.009/1e9) || !near(a.GBps, 3e6/0.009/1e9) || !near(a.Intensity, 2000) {
		t.Errorf("matmul A rates: %v GFLOP/s, %v GB/s, %v FLOP/B", a.GFLOPS, a.GBps, a.Intensity)
	}
	// Equal totals (copy and adamw, 2 ms) fall back to name order.
	want := []string{"matmul (64,32) (32,16) (64,16)", "matmul (32,64) (64,16) (32,16)", "adamw (10)", "copy (8) (8)"}
	for i, row := range r.Rows {
		if got := row.Kernel + " " + row.Shape; got != want[i] {
			t.Errorf("row %d = %q, want %q", i, got, want[i])
		}
	}
	var share float64
	for _, row := range r.Rows {
		share += row.Share
	}
	if !near(share, 1) {
		t.Errorf("shares add up to %v", share)
	}
	if c := r.Rows[3]; c.GFLOPS != 0 || !near(c.GBps, 2e6/0.002/1e9) {
		t.Errorf("copy rates: %+v", c)
	}
}

func TestReportGroupingSortingTop(t *testing.T) {
	p := synthetic()
	labels := func(r *Report) string {
		var s []string
		for _, row := range r.Rows {
			l := row.Label()
			if row.Phase != "" {
				l += "/" + row.Phase
			}
			s = append(s, l)
		}
		return strings.Join(s, ", ")
	}
	for _, tc := range []struct {
		opts ReportOptions
		want string
	}{
		{ReportOptions{Group: GroupName}, "matmul (blas), adamw (go), copy (go)"},
		{ReportOptions{Group: GroupName, ByPhase: true}, "matmul (blas)/forward, matmul (blas)/backward, adamw (go)/optimizer, copy (go)/forward"},
		{ReportOptions{Group: GroupName, Sort: SortCalls}, "matmul (blas), copy (go), adamw (go)"},
		{ReportOptions{Group: GroupName, Sort: SortMean}, "matmul (blas), adamw (go), copy (go)"},
		{ReportOptions{Group: GroupName, Sort: SortName}, "adamw (go), copy (go), matmul (blas)"},
		{ReportOptions{Sort: SortMean}, "matmul (blas), matmul (blas), adamw (go), copy (go)"},
		{ReportOptions{Group: GroupScope}, "(forward), (backward), (optimizer)"},
	} {
		if got := labels(p.Report(tc.opts)); got != tc.want {
			t.Errorf("%+v: rows %s, want %s", tc.opts, got, tc.want)
		}
	}
	mm := p.Report(ReportOptions{Group: GroupName}).Rows[0]
	if mm.Calls != 4 || mm.Total != 15*ms || mm.Min != 2*ms || mm.Max != 6*ms || mm.FLOPs != 8e9 {
		t.Errorf("matmul by name: %+v", mm)
	}
	top := p.Report(ReportOptions{Top: 2})
	if len(top.Rows) != 2 || top.Omitted != 2 || top.OmittedTotal != 4*ms || !near(top.OmittedShare, 4.0/19) {
		t.Errorf("top 2: %d rows, omitted %d, %v, %v", len(top.Rows), top.Omitted, top.OmittedTotal, top.OmittedShare)
	}
	if s := top.String(); !strings.Contains(s, "… and 2 more rows: 4.000 ms (21.1 % of kernel time)") {
		t.Errorf("top 2 text lacks the omitted line:\n%s", s)
	}
}

func TestReportPerIteration(t *testing.T) {
	p := synthetic()
	p.Iterations = 2
	r := p.Report(ReportOptions{Group: GroupName})
	if r.Wall != 12500*time.Microsecond || r.Kernel != 9500*time.Microsecond || r.Calls != 3.5 {
		t.Errorf("per iteration: wall %v kernel %v calls %v", r.Wall, r.Kernel, r.Calls)
	}
	mm := r.Rows[0]
	if mm.Calls != 2 || mm.Total != 7500*time.Microsecond || mm.Mean != 3750*time.Microsecond || mm.FLOPs != 4e9 {
		t.Errorf("matmul per iteration: %+v", mm)
	}
	if !near(mm.GFLOPS, 8e9/0.015/1e9) {
		t.Errorf("rates must not depend on iterations: %v", mm.GFLOPS)
	}
	if s := r.String(); !strings.Contains(s, "per iteration (mean of 2)") || !strings.Contains(s, "3.5 kernel calls") {
		t.Errorf("text:\n%s", s)
	}
}

func TestRoofline(t *testing.T) {
	// Ridge at 10 FLOP/B. Each kernel runs 20 ms and would need 10 ms at
	// the roofline: 50 %.
	peak := &Roofline{Device: "test", GFLOPS: 100, GBps: 10}
	p := FromCalls(t0, 100*ms,
		call("compute", "", forge.PhaseForward, 0, 20*ms, 1e9, 1e6),       // I = 1000
		call("memory", "", forge.PhaseForward, 20*ms, 20*ms, 1e6, 1e8),    // I = 0.01
		call("copy", "", forge.PhaseForward, 40*ms, 20*ms, 0, 1e8),        // I = 0
		call("ridge", "", forge.PhaseForward, 60*ms, 20*ms, 1e9, 1e8),     // I = 10: 1e9/100e9 = 1e8/10e9 = 10 ms
		call("declares-none", "", forge.PhaseForward, 80*ms, 20*ms, 0, 0), // no roofline
	)
	r := p.Report(ReportOptions{Peak: peak, Sort: SortName})
	got := map[string]Row{}
	for _, row := range r.Rows {
		got[row.Kernel] = row
	}
	for _, tc := range []struct {
		kernel, bound      string
		attainable, pct, i float64
	}{
		{"compute", "compute", 100, 0.5, 1000},
		{"memory", "memory", 0.1, 0.5, 0.01},
		{"copy", "memory", 0, 0.5, 0},
		{"ridge", "compute", 100, 0.5, 10},
		{"declares-none", "", 0, 0, 0},
	} {
		row := got[tc.kernel]
		if row.Bound != tc.bound || !near(row.Attainable, tc.attainable) || !near(row.PctRoof, tc.pct) || !near(row.Intensity, tc.i) {
			t.Errorf("%s: bound %q attainable %v pct %v intensity %v; want %q %v %v %v",
				tc.kernel, row.Bound, row.Attainable, row.PctRoof, row.Intensity, tc.bound, tc.attainable, tc.pct, tc.i)
		}
	}
	if m := got["memory"]; !near(m.GBps, 5) || !near(m.GFLOPS, 0.05) {
		t.Errorf("memory kernel: %v GB/s %v GFLOP/s", m.GBps, m.GFLOPS)
	}
	// Another device's peak leaves the roofline empty.
	other := p.Report(ReportOptions{Peak: &Roofline{Device: "gpu", GFLOPS: 100, GBps: 10}})
	for _, row := range other.Rows {
		if row.Bound != "" || row.PctRoof != 0 {
			t.Errorf("%s placed on another device's roofline: %+v", row.Kernel, row)
		}
	}
	s := r.String()
	for _, want := range []string{"roofline: test", "FLOP/B", "bound", "% roof", "50.0 %", "memory", "compute"} {
		if !strings.Contains(s, want) {
			t.Errorf("text lacks %q:\n%s", want, s)
		}
	}
}

// A report's header says what each device ran with (Device.Describe: for
// the CPU the BLAS library and its kernels), and its roofline line gives
// the FMA roof with the sgemm figure as a share of it.
func TestReportSaysWhatRan(t *testing.T) {
	onCPU := call("matmul", "openblas", forge.PhaseForward, 0, 10*ms, 1e9, 1e6)
	onCPU.Device = "cpu"
	p := FromCalls(t0, 30*ms, onCPU, call("softmax", "", forge.PhaseForward, 10*ms, 10*ms, 0, 1e6))
	cpuLine := forge.DefaultDevice().Describe()
	if !strings.HasPrefix(cpuLine, "cpu: ") || !strings.Contains(cpuLine, "matmul ") {
		t.Fatalf("the CPU's Describe line: %q", cpuLine)
	}
	peak := &Roofline{Version: peakVersion, Device: "cpu", CPU: "test CPU", Procs: 2, Variant: "openblas-Test", Describe: cpuLine,
		GFLOPS: 200, Roof: "fma", FMA: 200, FMAKernel: "avx512-zmm", FMAVector: true, FMAOther: []FMARate{{"avx2-ymm", 198}},
		Sgemm: 150, MatmulN: 2048, GBps: 20}
	r := p.Report(ReportOptions{Peak: peak})
	if len(r.DeviceInfo) != 2 || r.DeviceInfo[0] != cpuLine || r.DeviceInfo[1] != "test" {
		t.Fatalf("device info %q", r.DeviceInfo)
	}
	s := r.String()
	for _, want := range []string{
		"\ndevice: " + cpuLine + "\n", "\ndevice: test\n",
		"roofline: cpu (test CPU, 2 procs): peak 200.0 GFLOP/s FMA (avx512-zmm on 2 workers; avx2-ymm 198.0), sgemm 2048³ 150.0 GFLOP/s = 75 % of peak (matmul openblas-Test)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("text lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "peak measured with") {
		t.Errorf("the peak's device line repeated:\n%s", s)
	}
	// % roof is of the FMA roof, not of the sgemm figure: 1 GFLOP in 10 ms
	// is 100 GFLOP/s, half of 200.
	for _, row := range r.Rows {
		if row.Kernel == "matmul" && (!near(row.PctRoof, 0.5) || row.Attainable != 200) {
			t.Errorf("matmul on the roofline: %+v", row)
		}
	}
	peak.Describe = "cpu: 1 workers, matmul elsewhere"
	if s := p.Report(ReportOptions{Peak: peak}).String(); !strings.Contains(s, "(peak measured with cpu: 1 workers, matmul elsewhere)") {
		t.Errorf("a peak measured with other kernels does not say so:\n%s", s)
	}
	if s := peak.String(); !strings.HasSuffix(s, "\n  device: cpu: 1 workers, matmul elsewhere") {
		t.Errorf("the roofline's String does not say what ran: %q", s)
	}
}

func TestPhasesSplitWall(t *testing.T) {
	// 0–1 data, 2–5 and 6–8 forward, 10–15 backward, 16–18 optimizer, end 20.
	p := FromCalls(t0, 20*ms,
		call("a", "", forge.PhaseForward, 2*ms, 3*ms, 0, 0),
		call("b", "", forge.PhaseForward, 6*ms, 2*ms, 0, 0),
		call("c", "", forge.PhaseBackward, 10*ms, 5*ms, 0, 0),
		call("d", "", forge.PhaseOptimizer, 16*ms, 2*ms, 0, 0),
	)
	p.Spans = []Span{{Name: "data", Start: t0, Duration: 1 * ms}}
	r := p.Report(ReportOptions{})
	want := []PhaseRow{
		{Phase: "data", Calls: 0, Kernel: 0, Outside: 1 * ms, Wall: 1 * ms, Share: 0.05},
		{Phase: "forward", Calls: 2, Kernel: 5 * ms, Outside: 2 * ms, Wall: 7 * ms, Share: 0.35},
		{Phase: "backward", Calls: 1, Kernel: 5 * ms, Outside: 2 * ms, Wall: 7 * ms, Share: 0.35},
		{Phase: "optimizer", Calls: 1, Kernel: 2 * ms, Outside: 3 * ms, Wall: 5 * ms, Share: 0.25},
	}
	if len(r.Phases) != len(want) {
		t.Fatalf("phases %+v", r.Phases)
	}
	for i, w := range want {
		g := r.Phases[i]
		if g.Phase != w.Phase || g.Calls != w.Calls || g.Kernel != w.Kernel || g.Outside != w.Outside || g.Wall != w.Wall || !near(g.Share, w.Share) {
			t.Errorf("phase %d = %+v, want %+v", i, g, w)
		}
	}
	if r.Outside != 8*ms {
		t.Errorf("outside %v, want 8 ms (= the phases' outside)", r.Outside)
	}
	// No kernels at all: the whole wall is "other".
	empty := FromCalls(t0, 3*ms).Report(ReportOptions{})
	if len(empty.Phases) != 1 || empty.Phases[0].Phase != "other" || empty.Phases[0].Wall != 3*ms || len(empty.Rows) != 0 {
		t.Errorf("empty profile: %+v", empty)
	}
	_ = empty.String()
}

func TestReportText(t *testing.T) {
	p := synthetic()
	p.Records[0].Scope = "blocks.0"
	s := p.Report(ReportOptions{}).String()
	for _, want := range []string{
		"profile: wall 25.00 ms, in kernels 19.00 ms (76.0 %), outside kernels 6.000 ms (24.0 %), 7 kernel calls",
		"phase      calls   kernels   outside      wall   share",
		"forward        5  11.00 ms  1.000 ms  12.00 ms  48.0 %",
		"kernel         shape                    calls     total      mean       min   share  GFLOP/s  GB/s",
		"matmul (blas)  (64,32) (32,16) (64,16)      3  9.000 ms  3.000 ms  2.000 ms  47.4 %      667  0.33",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("text lacks %q:\n%s", want, s)
		}
	}
	p.Scopes = []Span{{Name: "blocks.0", Start: t0, Duration: 2500 * time.Microsecond}}
	scr := p.Report(ReportOptions{Group: GroupScope})
	for _, row := range scr.Rows {
		if want := map[string]time.Duration{"blocks.0": 2500 * time.Microsecond}[row.Scope]; row.Wall != want {
			t.Errorf("scope %s wall %v, want %v", row.Scope, row.Wall, want)
		}
	}
	sc := scr.String()
	for _, want := range []string{"scope wall", "blocks.0", "2.500 ms", "(forward)", "(backward)", "(optimizer)"} {
		if !strings.Contains(sc, want) {
			t.Errorf("scope text lacks %q:\n%s", want, sc)
		}
	}
	if strings.Contains(sc, "shape") {
		t.Errorf("scope report has a shape column:\n%s", sc)
	}
}

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		812:                     "812 ns",
		45600:                   "45.60 µs",
		12345678:                "12.35 ms",
		123456789:               "123.5 ms",
		1234 * ms:               "1.234 s",
		-2 * ms:                 "-2.000 ms",
		999:                     "999 ns",
		999940:                  "999.9 µs",
		999999:                  "1.000 ms",
		999999999:               "1.000 s",
		time.Duration(99999999): "100.0 ms",
		9999999:                 "10.00 ms",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%d) = %q, want %q", int64(d), got, want)
		}
	}
}
