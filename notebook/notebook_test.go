//go:build unix

package notebook

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/data"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/optim"
	"github.com/forgeml/forge/forge/profile"
	"github.com/forgeml/forge/forge/tokenizer"
	"github.com/forgeml/forge/forge/train"
)

var optionRE = regexp.MustCompile(`(?s)var option = (.*?);\nvar tries`)

func TestChartHTMLNaNAndEscaping(t *testing.T) {
	s := Series{Name: "loss", X: []float64{1, 2, 3, 4}, Y: []float64{1, math.NaN(), math.Inf(1), 0.5}}
	opt := LineOption("</script><script>alert(1)</script>", "step", "loss", false, s)
	if !json.Valid([]byte(opt)) {
		t.Fatalf("go-echarts option is not JSON: %s", opt)
	}
	h := ChartHTML("c1", opt, 0, "a </script> placeholder")
	if n := strings.Count(h, "</script>"); n != 1 {
		t.Fatalf("%d </script> in the fragment, want only the closing tag:\n%s", n, h)
	}
	m := optionRE.FindStringSubmatch(h)
	if m == nil {
		t.Fatalf("no option in %s", h)
	}
	var o map[string]any
	if err := json.Unmarshal([]byte(m[1]), &o); err != nil {
		t.Fatalf("option in the page is not JSON: %v", err)
	}
	data := o["series"].([]any)[0].(map[string]any)["data"].([]any)
	got := []any{}
	for _, d := range data {
		got = append(got, d.(map[string]any)["value"].([]any)[1])
	}
	if got[1] != "-" || got[2] != "-" || got[0] != 1.0 || got[3] != 0.5 {
		t.Fatalf("values %v, want [1 - - 0.5]", got)
	}
	title := o["title"].(map[string]any)["text"]
	if title != "</script><script>alert(1)</script>" {
		t.Fatalf("title %q", title)
	}
	for _, want := range []string{`id="c1"`, "window.echarts", "dispose", "echarts.init", "setOption", "placeholder"} {
		if !strings.Contains(h, want) {
			t.Errorf("fragment lacks %q", want)
		}
	}
	// A map option with NaN marshals with "-".
	h = ChartHTML("c2", map[string]any{"series": []any{map[string]any{"data": []float64{1, math.NaN()}}}}, 100, "")
	if !strings.Contains(h, `"data":[1,"-"]`) {
		t.Fatalf("NaN not mapped: %s", h)
	}
	// An invalid (empty) option is reported, not drawn.
	if h := ChartHTML("c3", "", 100, ""); !strings.Contains(h, "forge-chart-error") {
		t.Fatalf("empty option drawn: %s", h)
	}
}

func TestDownsample(t *testing.T) {
	n := 100000
	xs, ys := make([]float64, n), make([]float64, n)
	for i := range xs {
		xs[i], ys[i] = float64(i), math.Sin(float64(i)/1000)
	}
	ys[54321] = 100 // a spike survives
	ox, oy := Downsample(xs, ys, MaxPoints)
	if len(ox) > MaxPoints || len(ox) < MaxPoints-2 || len(oy) != len(ox) {
		t.Fatalf("%d points", len(ox))
	}
	if ox[0] != 0 || ox[len(ox)-1] != float64(n-1) {
		t.Fatalf("ends %v %v", ox[0], ox[len(ox)-1])
	}
	found := false
	for i := range ox {
		if oy[i] == 100 {
			found = true
		}
		if i > 0 && ox[i] <= ox[i-1] {
			t.Fatal("x not increasing")
		}
	}
	if !found {
		t.Fatal("spike lost")
	}
	if sx, _ := Downsample(xs[:10], ys[:10], MaxPoints); len(sx) != 10 {
		t.Fatal("short series changed")
	}
	opt := LineOption("long", "step", "", false, Series{Name: "y", X: xs, Y: ys})
	if c := strings.Count(opt, "],"); c > MaxPoints+10 {
		t.Fatalf("option holds %d points", c)
	}
}

func TestShowTensor(t *testing.T) {
	resetLibrary()
	x := forge.FromSlice([]float32{1, 2, float32(math.NaN()), 4, 5, 6}, 2, 3)
	msgs := capture(t, func() { Show(x) })
	if len(msgs) != 1 {
		t.Fatalf("%d messages", len(msgs))
	}
	h := htmlOf(t, msgs[0])
	for _, want := range []string{"Tensor [2 3] float32 on cpu", "forge-values", "<td>5</td>", "nan", "forge-bad", "std"} {
		if !strings.Contains(h, want) {
			t.Errorf("tensor HTML lacks %q:\n%s", want, h)
		}
	}
	if strings.Contains(h, "forge-chart") {
		t.Error("a plain Show drew a chart")
	}
	big := forge.Arange(0, 400, 1).Reshape(20, 20)
	h = htmlOf(t, capture(t, func() { Show(big) })[0])
	if !strings.Contains(h, "…") || !strings.Contains(h, "<td>399</td>") || strings.Contains(h, "<td>200</td>") {
		t.Errorf("large tensor not summarised:\n%s", h)
	}

	// Heatmap: the first chart carries the library, once per process.
	msgs = capture(t, func() { ShowHeatmap(big); ShowHeatmap(x) })
	if len(msgs) != 2 || !isLibrary(htmlOf(t, msgs[0])) || isLibrary(htmlOf(t, msgs[1])) {
		t.Fatalf("%d messages; want two charts, the first with the library", len(msgs))
	}
	lib := htmlOf(t, msgs[0])
	if !strings.Contains(lib, `new Function("define", "module", "exports", src)).call(window)`) {
		t.Error("library not run hidden from require.js")
	}
	for _, m := range msgs {
		if h := htmlOf(t, m); !strings.Contains(h, `"type":"heatmap"`) || !strings.Contains(h, "forge-chart") {
			t.Errorf("not a heatmap chart: %.300s", h)
		}
	}
	msgs = capture(t, func() { ShowHistogram(big) })
	if len(msgs) != 1 || !strings.Contains(htmlOf(t, msgs[0]), `"type":"bar"`) {
		t.Fatalf("histogram: %d messages", len(msgs))
	}
	msgs = capture(t, func() { ShowHeatmap(forge.Arange(0, 3, 1)) })
	if !strings.Contains(htmlOf(t, msgs[0]), "needs a 2-D tensor") {
		t.Error("1-D heatmap not refused")
	}
}

func tinyModel(t *testing.T) *gpt.Model {
	cfg := gpt.DefaultConfig()
	cfg.Vocab, cfg.Context, cfg.Dim, cfg.Layers, cfg.Heads = 64, 16, 16, 1, 2
	m, err := gpt.New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestShowModule(t *testing.T) {
	m := tinyModel(t)
	h := htmlOf(t, capture(t, func() { Show(m) })[0])
	total := 0
	for _, p := range m.Params() {
		total += p.Tensor.Numel()
		if !strings.Contains(h, p.Name) {
			t.Errorf("parameter %s missing", p.Name)
		}
	}
	if !strings.Contains(h, fmt.Sprintf("%d,%03d parameters", total/1000, total%1000)) || !strings.Contains(h, "forge-params") || !strings.Contains(h, "%") {
		t.Errorf("module HTML:\n%s", h)
	}
	txt := textMode(t, func() { Show(m) })
	if !strings.Contains(txt, m.Params()[0].Name) {
		t.Errorf("module text: %s", txt)
	}
	if strings.Contains(h, ">notes<") {
		t.Errorf("a notes column without quantisers or masks")
	}
	// Quantised and pruned layers show in a notes column.
	for _, l := range m.BlockLinears() {
		l.Layer.Quant = "int8"
	}
	if err := nn.PruneByMagnitude(m.BlockLinears()[:1], 0.5); err != nil {
		t.Fatal(err)
	}
	h = htmlOf(t, capture(t, func() { Show(m) })[0])
	if !strings.Contains(h, ">notes<") || !strings.Contains(h, ">int8, mask 50.0%<") || !strings.Contains(h, ">int8<") {
		t.Errorf("module HTML lacks the notes:\n%s", h)
	}
}

// Show of an optimizer lists its parameter groups: with Muon, the blocks'
// matrices in the Muon group and the embedding and norms with AdamW.
func TestShowOptimizer(t *testing.T) {
	m := tinyModel(t)
	opt := optim.NewMuon(nn.Tensors(m), optim.DefaultMuonConfig())
	h := htmlOf(t, capture(t, func() { Show(opt) })[0])
	for _, want := range []string{"forge-optim", "<td class=\"l\">muon</td>", "blocks.*.attn.wqkv.weight", "<td class=\"l\">adamw</td>", "wte.weight"} {
		if !strings.Contains(h, want) {
			t.Errorf("optimizer HTML lacks %q:\n%s", want, h)
		}
	}
	txt := textMode(t, func() { Show(opt) })
	if !strings.Contains(txt, "muon  lr") || !strings.Contains(txt, "adamw lr") {
		t.Errorf("optimizer text: %s", txt)
	}
}

func testHistory() train.History {
	var h train.History
	for i := 1; i <= 30; i++ {
		m := train.Metrics{Step: i, Loss: 5 - float64(i)/10, LR: 1e-3, GradNorm: 1, TokensPerSec: 1000, Tokens: int64(i * 64)}
		if i%10 == 0 {
			v := m.Loss + 0.1
			m.ValLoss = &v
		}
		if i == 7 {
			m.GradNorm = math.Inf(1)
		}
		h.Steps = append(h.Steps, m)
	}
	return h
}

func TestShowHistory(t *testing.T) {
	h := testHistory()
	resetLibrary()
	for _, x := range []any{h, &h, &train.Trainer{History: h}} {
		msgs := capture(t, func() { Show(x) })
		if len(msgs) < 1 {
			t.Fatalf("%T: no message", x)
		}
		page := payloadRE.ReplaceAllString(htmlOf(t, msgs[len(msgs)-1]), "") // base64 may spell "NaN"
		for _, want := range []string{`"name":"loss"`, `"name":"val_loss"`, "learning rate", "grad norm", "tokens / s", "30 steps", "forge-chart"} {
			if !strings.Contains(page, want) {
				t.Errorf("%T: history HTML lacks %q", x, want)
			}
		}
		if strings.Contains(page, "NaN") || strings.Contains(page, "+Inf") {
			t.Errorf("%T: non-finite value in the page", x)
		}
	}
	txt := textMode(t, func() { Show(h) })
	if !strings.Contains(txt, "30 steps: loss 4.9 → 2, val_loss 2.1") {
		t.Errorf("history text: %q", txt)
	}
}

func testReport() profile.Report {
	return profile.Report{
		Devices: []string{"cpu"}, DeviceInfo: []string{"cpu: 2 workers, matmul openblas-Cooperlake: OpenBLAS 0.3.21"}, Iterations: 1, Wall: 10 * time.Millisecond, Kernel: 8 * time.Millisecond,
		Outside: 2 * time.Millisecond, KernelShare: 0.8, Calls: 3,
		Rows: []profile.Row{
			{Kernel: "matmul", Variant: "avx512", Shape: "[64 32]@[32 32]", Device: "cpu", Calls: 2, Total: 6 * time.Millisecond, Mean: 3 * time.Millisecond, Share: 0.75, GFLOPS: 12},
			{Kernel: "softmax", Shape: "[4 16 16]", Device: "cpu", Calls: 1, Total: 2 * time.Millisecond, Mean: 2 * time.Millisecond, Share: 0.25, GBps: 3},
		},
	}
}

func TestShowReport(t *testing.T) {
	r := testReport()
	resetLibrary()
	msgs := capture(t, func() { Show(r) })
	if len(msgs) != 1 || !isLibrary(htmlOf(t, msgs[0])) {
		t.Fatalf("%d messages, want one carrying the library", len(msgs))
	}
	h := htmlOf(t, msgs[0])
	for _, want := range []string{"forge-sortable", "matmul (avx512)", "softmax", "75.0%", `"type":"bar"`, "kernel time", "addEventListener(\"click\""} {
		if !strings.Contains(h, want) {
			t.Errorf("report HTML lacks %q", want)
		}
	}
	if strings.Contains(h, "roofline") {
		t.Error("a report without a peak drew a roofline")
	}
	if !strings.Contains(h, "device: cpu: 2 workers, matmul openblas-Cooperlake: OpenBLAS 0.3.21") {
		t.Error("the report's header does not say what the device ran with")
	}

	// With a peak: a roofline chart holding the kernels that have FLOPs.
	r.Peak = &profile.Roofline{Device: "cpu", CPU: "test cpu", GFLOPS: 200, GBps: 40}
	r.Rows[0].FLOPs, r.Rows[0].Bytes, r.Rows[0].Intensity = 72e6, 3e6, 24
	h = htmlOf(t, capture(t, func() { Show(r) })[0])
	for _, want := range []string{"roofline: cpu (test cpu", "roofline on cpu (test cpu), 1 row without FLOPs not placed", `"type":"scatter"`, `"name":"matmul (avx512) [64 32]@[32 32]"`, `"value":[24,12]`, `"value":[5,200]`, "roof (200 GFLOP/s, 40 GB/s)"} {
		if !strings.Contains(h, want) {
			t.Errorf("roofline lacks %q", want)
		}
	}
	if txt := textMode(t, func() { Show(&r) }); !strings.Contains(txt, "matmul") {
		t.Errorf("report text: %q", txt)
	}
}

func TestShowTextAndTokens(t *testing.T) {
	h := htmlOf(t, capture(t, func() { Show(Text("It is a truth <universally> acknowledged")) })[0])
	if !strings.Contains(h, "It is a truth &lt;universally&gt; acknowledged") || !strings.Contains(h, "forge-text") {
		t.Errorf("text HTML: %s", h)
	}
	tok := tokenizer.TrainChar("hello world\n")
	h = htmlOf(t, capture(t, func() { ShowTokens(tok, "hello\nworld") })[0])
	if c := strings.Count(h, "<span"); c != 11 {
		t.Errorf("%d token spans, want 11", c)
	}
	if !strings.Contains(h, "background:") || !strings.Contains(h, "11 tokens") {
		t.Errorf("tokens HTML: %s", h)
	}
	txt := textMode(t, func() { ShowTokens(tok, "hello") })
	if !strings.Contains(txt, "h|e|l|l|o") {
		t.Errorf("tokens text: %q", txt)
	}
	if txt := textMode(t, func() { Show(Text("sampled")) }); txt != "sampled\n" {
		t.Errorf("text form %q", txt)
	}
}

func TestTextForms(t *testing.T) {
	x := forge.FromSlice([]float32{1, 2, 3, 4}, 2, 2)
	txt := textMode(t, func() { Show(x); ShowHeatmap(x); ShowHistogram(x) })
	if strings.Contains(txt, "<") || !strings.Contains(txt, "[2 2]") || !strings.Contains(txt, "│") {
		t.Errorf("tensor text forms: %s", txt)
	}
	// Nothing reaches the pipe outside a notebook.
	msgs := capture(t, func() {
		textMode(t, func() { Show(x); Show(testHistory()); Show(testReport()) })
	})
	if len(msgs) != 0 {
		t.Errorf("%d messages sent outside a notebook", len(msgs))
	}
	if txt := textMode(t, func() { Show(struct{ A int }{3}) }); txt != "{3}\n" {
		t.Errorf("fallback %q", txt)
	}
}

// testSession opens a tiny char-level run in a temp dir.
func testSession(t *testing.T, dir string) *train.Session {
	t.Helper()
	c := train.DefaultConfig()
	c.Name, c.Tokenizer = "nbtest", "char"
	c.Model.Vocab, c.Model.Context, c.Model.Dim, c.Model.Layers, c.Model.Heads = 128, 16, 16, 1, 2
	c.Batch, c.GradAccum, c.Steps, c.Warmup = 2, 1, 100, 2
	c.EvalEvery, c.EvalBatches, c.SaveEvery = 4, 1, 0
	s, err := open(dir, train.OpenOptions{Texts: []string{data.Austen()[:20000]}, Source: "test", NoCache: true}, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fakeClock advances by step on every reading.
func fakeClock(step time.Duration) func() time.Time {
	var n atomic.Int64
	t0 := time.Unix(1_700_000_000, 0)
	return func() time.Time { return t0.Add(time.Duration(n.Add(1)) * step) }
}

func TestTrainDashboard(t *testing.T) {
	s := testSession(t, t.TempDir())
	defer func(f func() time.Time) { now = f }(now)
	now = fakeClock(300 * time.Millisecond) // ≈ 2 readings per step: one update every ~2 steps
	resetLibrary()
	const n = 12
	var done int
	var err error
	msgs := capture(t, func() { done, err = trainCtx(context.Background(), s, n) })
	if err != nil || done != n {
		t.Fatalf("done %d, %v", done, err)
	}
	if !isLibrary(htmlOf(t, msgs[0])) {
		t.Fatal("library not sent first")
	}
	ups := msgs[1:]
	id := ups[0].DisplayID
	if id == "" {
		t.Fatal("dashboard has no display id")
	}
	for _, m := range ups {
		if m.DisplayID != id {
			t.Fatalf("display ids %q and %q", id, m.DisplayID)
		}
	}
	// start + throttled + final: far fewer than one per step, more than two.
	if len(ups) < 3 || len(ups) > n/2+2 {
		t.Fatalf("%d updates for %d steps", len(ups), n)
	}
	first, final := htmlOf(t, ups[0]), htmlOf(t, ups[len(ups)-1])
	if !strings.Contains(first, `data-state="starting"`) {
		t.Errorf("first update: %.300s", first)
	}
	for _, want := range []string{`data-state="done"`, `data-step="12"`, "12/12 steps", "forge-loss", `"name":"val_loss"`, "width:100.0%", "tokens / s"} {
		if !strings.Contains(final, want) {
			t.Errorf("final dashboard lacks %q", want)
		}
	}
	// The same chart ids in every update (redrawn in place).
	ids := regexp.MustCompile(`id="(forge-loss-[^"]+)"`)
	a, b := ids.FindStringSubmatch(htmlOf(t, ups[1])), ids.FindStringSubmatch(final)
	if a == nil || b == nil || a[1] != b[1] {
		t.Errorf("chart ids change between updates: %v %v", a, b)
	}

	// Outside a notebook: progress lines.
	now = fakeClock(time.Second)
	var txt string
	txt = textMode(t, func() { _, err = trainCtx(context.Background(), s, 3) })
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(txt), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[4], "[done] 3/3 steps (step 15) loss ") {
		t.Errorf("progress lines:\n%s", txt)
	}
}

func TestTrainInterruptAndReopen(t *testing.T) {
	dir := t.TempDir()
	s := testSession(t, dir)
	defer func(f func() time.Time) { now = f }(now)
	var calls atomic.Int64
	base := fakeClock(10 * time.Millisecond)
	now = func() time.Time {
		if calls.Add(1) == 6 { // a few steps in, as GoNB's interrupt would
			p, _ := os.FindProcess(os.Getpid())
			p.Signal(os.Interrupt)
		}
		return base()
	}
	resetLibrary()
	var err error
	msgs := capture(t, func() { err = Train(s, 500) })
	if err != nil {
		t.Fatal(err)
	}
	step := s.Trainer().StepCount()
	if step == 0 || step >= 500 {
		t.Fatalf("stopped at step %d", step)
	}
	final := htmlOf(t, msgs[len(msgs)-1])
	if !strings.Contains(final, `data-state="interrupted"`) || !strings.Contains(final, "forge-chart") {
		t.Fatalf("final dashboard: %.400s", final)
	}
	s.Close()
	// The next cell reopens the run where it stopped.
	t0 := time.Now()
	s2, err := open(dir, train.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Trainer().StepCount() != step || len(s2.Trainer().History.Steps) != step || !s2.Resumed() {
		t.Fatalf("reopened at step %d with %d history, want %d", s2.Trainer().StepCount(), len(s2.Trainer().History.Steps), step)
	}
	t.Logf("interrupted at step %d, reopened in %v", step, time.Since(t0))
	if _, err := Open(filepath.Join(dir, "x"), train.Config{}, train.Config{}); err == nil {
		t.Error("two configs accepted")
	}
}

func TestHeatmapOption(t *testing.T) {
	// 256×130: rows halve (2 per cell), columns map 130 → 128 cells.
	rows, cols := 256, 130
	v := make([]float64, rows*cols)
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			v[r*cols+c] = float64(r) + 1e-3*float64(c)
		}
	}
	v[5*cols+7] = math.NaN() // cell (row 2, col 6 or 7) becomes a gap
	var o struct {
		Series []struct {
			Data [][3]any `json:"data"`
		} `json:"series"`
	}
	opt := HeatmapOption("w", rows, cols, v)
	if err := json.Unmarshal([]byte(opt), &o); err != nil {
		t.Fatal(err)
	}
	d := o.Series[0].Data
	if len(d) != 128*128 {
		t.Fatalf("%d cells, want 128×128", len(d))
	}
	gaps := 0
	for _, cell := range d {
		x, y := int(cell[0].(float64)), int(cell[1].(float64))
		if s, ok := cell[2].(string); ok && s == "-" {
			gaps++
			continue
		}
		got := cell[2].(float64)
		// the block of rows 2y, 2y+1: mean row 2y+0.5; columns ≈ x.
		if want := float64(2*y) + 0.5; math.Abs(got-want) > 0.01*want+0.2 {
			t.Fatalf("cell (%d,%d) = %v, want ≈ %v", x, y, got, want)
		}
	}
	if gaps != 1 {
		t.Errorf("%d gaps, want the one cell holding the NaN", gaps)
	}
	if n := len(opt); n > 300_000 {
		t.Errorf("128×128 heatmap option is %d bytes; keep it under 300 kB", n)
	}
	if !strings.Contains(opt, "block means, 128×128 cells") {
		t.Error("title does not say the matrix was reduced")
	}
}

// TestTitlesClearOfLegends: go-echarts' default legend sits at the top
// centre, right on the title; a histogram's and a heatmap's single series
// need none (the y axis or the colour scale names it), so none is shown.
func TestTitlesClearOfLegends(t *testing.T) {
	hist := HistogramOption("W: Tensor [64 64] float32", []float64{1, 2, 3, 4}, 4)
	heat := HeatmapOption("W: Tensor [2 2] float32", 2, 2, []float64{1, 2, 3, 4})
	for name, opt := range map[string]string{"histogram": hist, "heatmap": heat} {
		var o map[string]any
		if err := json.Unmarshal([]byte(opt), &o); err != nil {
			t.Fatal(err)
		}
		if l, ok := o["legend"].(map[string]any); !ok || l["show"] != false {
			t.Errorf("%s: legend %v, want one that is not shown", name, o["legend"])
		}
		title := o["title"].(map[string]any)["text"]
		if s := o["series"].([]any)[0].(map[string]any)["name"]; s == title {
			t.Errorf("%s: the series is named like the title (%q)", name, s)
		}
	}
}

// TestHistogramTicksOneFormat: every tick label of an axis in one
// notation, with enough digits to tell neighbours apart.
func TestHistogramTicksOneFormat(t *testing.T) {
	fixed := regexp.MustCompile(`^-?\d+(\.\d+)?$`)
	sci := regexp.MustCompile(`^-?\d(\.\d+)?e[-+]\d+$`)
	for _, c := range []struct {
		name   string
		values []float64
	}{
		{"tiny", []float64{1e-5, 9.407e-05, 2e-4, 3e-4}}, // %.4g gave 3.9e-05 beside 0.000155
		{"unit", []float64{-1, -0.3, 0.2, 1}},
		{"large", []float64{1e6, 3e6, 7e6}},
		{"counts", []float64{0, 100, 1000}},
	} {
		var o map[string]any
		if err := json.Unmarshal([]byte(HistogramOption(c.name, c.values, 10)), &o); err != nil {
			t.Fatal(err)
		}
		var labels []string
		for _, l := range o["xAxis"].([]any)[0].(map[string]any)["data"].([]any) {
			labels = append(labels, l.(string))
		}
		nf, ns := 0, 0
		seen := map[string]bool{}
		for _, l := range labels {
			switch {
			case fixed.MatchString(l):
				nf++
			case sci.MatchString(l):
				ns++
			default:
				t.Errorf("%s: tick %q in neither notation", c.name, l)
			}
			if seen[l] {
				t.Errorf("%s: two ticks read %q", c.name, l)
			}
			seen[l] = true
		}
		if nf > 0 && ns > 0 {
			t.Errorf("%s: ticks mix notations: %v", c.name, labels)
		}
		lens := map[int]bool{}
		for _, l := range labels {
			_, frac, _ := strings.Cut(strings.TrimPrefix(strings.SplitN(l, "e", 2)[0], "-"), ".")
			lens[len(frac)] = true
		}
		if len(lens) != 1 {
			t.Errorf("%s: ticks with different numbers of decimals: %v", c.name, labels)
		}
	}
}

// TestProfileTimesDoNotWrap: a time in the profile table is one unit
// ("13.3 ms" joined by a non-breaking space, its cell nowrap), never
// "13.3" on one line and "ms" on the next.
func TestProfileTimesDoNotWrap(t *testing.T) {
	r := testReport()
	r.Rows[0].Total = 13300 * time.Microsecond
	h := reportHTML(&r)
	if !strings.Contains(h, ">13.3\u00a0ms</td>") {
		t.Errorf("the time is not joined to its unit by a non-breaking space:\n%.600s", h)
	}
	if regexp.MustCompile(`\d (ms|µs|s)<`).MatchString(h) {
		t.Error("a time with a breaking space before its unit")
	}
	if !strings.Contains(h, ".forge-table td:not(.l){white-space:nowrap}") {
		t.Error("the numeric cells may wrap")
	}
}

// TestPanicIsOneErrorOutput: a forge panic in a cell under
// `defer Recover()`, or inside a helper, is one readable error output,
// and the process goes on.
func TestPanicIsOneErrorOutput(t *testing.T) {
	msgs := capture(t, func() {
		func() {
			defer Recover()
			forge.Zeros(2, 3).MatMul(forge.Zeros(4, 5))
			t.Error("the panic did not stop the cell's code")
		}()
	})
	if len(msgs) != 1 {
		t.Fatalf("%d outputs, want one", len(msgs))
	}
	h := htmlOf(t, msgs[0])
	if !strings.Contains(h, "forge: matmul: inner dimensions differ: [2 3] @ [4 5]") || !strings.Contains(h, "forge-error") || strings.Contains(h, "goroutine") {
		t.Errorf("not one readable forge error: %s", h)
	}
	// Any other panic: its value, with the stack folded away.
	msgs = capture(t, func() {
		func() {
			defer Recover()
			var m map[string]int
			m["x"] = 1
		}()
	})
	if len(msgs) != 1 || !strings.Contains(htmlOf(t, msgs[0]), "panic: assignment to entry in nil map") || !strings.Contains(htmlOf(t, msgs[0]), "<details>") {
		t.Errorf("other panic: %d outputs %v", len(msgs), msgs)
	}
	// A helper given a bad argument reports it instead of ending the cell.
	msgs = capture(t, func() { ShowHistogram(nil); ShowHeatmap(nil) })
	if len(msgs) != 2 || !strings.Contains(htmlOf(t, msgs[0]), "notebook: ShowHistogram: panic:") || !strings.Contains(htmlOf(t, msgs[1]), "notebook: ShowHeatmap: panic:") {
		t.Errorf("helpers: %d outputs", len(msgs))
	}
	// Outside a notebook: one line on stderr.
	r, w, _ := os.Pipe()
	old := os.Stderr
	os.Stderr = w
	textMode(t, func() {
		func() { defer Recover(); forge.Zeros(2, 3).MatMul(forge.Zeros(4, 5)) }()
	})
	os.Stderr = old
	w.Close()
	b := make([]byte, 4096)
	n, _ := r.Read(b)
	if got := string(b[:n]); got != "error: forge: matmul: inner dimensions differ: [2 3] @ [4 5]\n" {
		t.Errorf("text form: %q", got)
	}
}

// A mixture of experts' history adds the routing chart; a plain one has none.
func TestShowHistoryRouter(t *testing.T) {
	h := testHistory()
	resetLibrary()
	plain := payloadRE.ReplaceAllString(htmlOf(t, capture(t, func() { Show(h) })[0]), "")
	if strings.Contains(plain, "MoE routing") {
		t.Error("a plain model's history shows a MoE routing chart")
	}
	for i := range h.Steps {
		h.Steps[i].Router = &train.RouterMetrics{Aux: 1.2, LoadMax: 1.5 - float64(i)/100, LoadMin: 0.4, Tokens: [][]int{{3, 5}}}
	}
	msgs := capture(t, func() { Show(h) })
	page := payloadRE.ReplaceAllString(htmlOf(t, msgs[len(msgs)-1]), "")
	for _, want := range []string{"MoE routing", `"name":"aux loss"`, `"name":"max load"`, `"name":"min load"`} {
		if !strings.Contains(page, want) {
			t.Errorf("MoE history HTML lacks %q", want)
		}
	}
}

func TestCompare(t *testing.T) {
	var a, b train.History
	for i := 1; i <= 5; i++ {
		a.Steps = append(a.Steps, train.Metrics{Step: i, Loss: 5 - float64(i)/2})
		b.Steps = append(b.Steps, train.Metrics{Step: i, Loss: 5 - float64(i)/4})
	}
	h, text := compareHTML("loss", []Run{{"plain", a}, {"muon", b}, {"empty", train.History{}}})
	if !strings.Contains(text, "plain") || !strings.Contains(text, "2.5") || !strings.Contains(text, "3.75") || !strings.Contains(text, "empty                    –") {
		t.Errorf("text: %q", text)
	}
	if strings.Count(h, `class="forge-chart"`) != 1 || !strings.Contains(h, `"muon"`) || !strings.Contains(h, "forge-compare") {
		t.Errorf("html lacks the chart or a series:\n%.400s", h)
	}
}
