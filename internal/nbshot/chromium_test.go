package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forgeml/forge/notebook"
)

// needBrowser returns a headless Chromium, or ends the test: a failure when
// FORGE_REQUIRE_CHROMIUM=1 (scripts/notebooks.sh sets it), else a skip that
// says why.
func needBrowser(t *testing.T) browser {
	t.Helper()
	p := findBrowser()
	if p == "" {
		if os.Getenv("FORGE_REQUIRE_CHROMIUM") == "1" {
			t.Fatalf("FORGE_REQUIRE_CHROMIUM=1 but FORGE_CHROMIUM is unset and none of %v is on PATH", browserNames)
		}
		t.Skipf("SKIP: no Chromium (FORGE_CHROMIUM unset, none of %v on PATH), so the headless rendering check did not run; install Debian's chromium, or set FORGE_REQUIRE_CHROMIUM=1 to make this a failure", browserNames)
	}
	return browser{path: p, timeout: 60 * time.Second}
}

// assetLibrary is the module's echarts library wrapped as the notebook
// package sends it.
func assetLibrary(t *testing.T) string {
	t.Helper()
	js, err := os.ReadFile(filepath.Join("..", "..", "notebook", "assets", "echarts.min.js"))
	if err != nil {
		t.Fatal(err)
	}
	return libraryFromJS(string(js))
}

// TestControlInChromium renders the negative control and checks that the
// measurement tells a drawn chart from an empty and a never-drawn one.
func TestControlInChromium(t *testing.T) {
	b := needBrowser(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "control.html")
	if err := os.WriteFile(page, []byte(controlPage(assetLibrary(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, img, err := b.render(page, filepath.Join(dir, "control.png"))
	if err != nil {
		t.Fatal(err)
	}
	ms := measure(img, rep)
	for _, m := range ms {
		t.Logf("%s: %.4f%% (%d of %d px, echarts instance %v)", m.Chart.ID, 100*m.Fraction, m.Ink, m.Pixels, m.Chart.Drawn)
	}
	if p := judgeControl(ms, defaultMinFraction); len(p) > 0 {
		t.Errorf("control: %v", p)
	}
	for _, m := range ms {
		switch m.Chart.ID {
		case controlDrawn:
			if !m.Chart.Drawn || m.Chart.Area != "grid" {
				t.Errorf("%s: drawn %v, area %q; want an echarts instance and its grid", m.Chart.ID, m.Chart.Drawn, m.Chart.Area)
			}
		case controlUndrawn:
			if m.Chart.Drawn || m.Chart.Area != "box" {
				t.Errorf("%s: drawn %v, area %q; want no instance, the box", m.Chart.ID, m.Chart.Drawn, m.Chart.Area)
			}
		}
	}
}

// TestNotebookPageInChromium runs the whole path on a synthetic executed
// notebook: extract its outputs, build the page, render, measure. A chart
// laid out in a flex row next to siblings parsed after it must be measured
// at its final size (the library comes after the outputs), and a heatmap
// big enough for progressive rendering must not hang the virtual clock.
func TestNotebookPageInChromium(t *testing.T) {
	b := needBrowser(t)
	heat := `{"animation":false,"grid":[{"left":"50","top":"40","right":"90","bottom":"30"}],` +
		`"xAxis":[{"type":"category","data":[` + seq(100) + `]}],"yAxis":[{"type":"category","data":[` + seq(100) + `]}],` +
		`"visualMap":[{"min":0,"max":1,"right":"0","top":"middle","inRange":{"color":["#313695","#ffffbf","#a50026"]}}],` +
		`"series":[{"type":"heatmap","data":[` + cells(100) + `]}]}`
	row := `<div style="display:flex;gap:10px;max-width:960px">` +
		`<div style="flex:1 1 300px">` + controlChart("nb-small-1", controlOption("small 1", true), 200, true) + `</div>` +
		`<div style="flex:1 1 300px">` + controlChart("nb-small-2", controlOption("small 2", true), 200, true) + `</div></div>`
	data := nbJSON(t,
		[]map[string]any{
			display("display_data", assetLibrary(t)),
			display("display_data", row),
			display("display_data", controlChart("nb-heatmap", heat, 420, true)),
		},
	)
	ch, err := extract(data)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "nb.html")
	if err := os.WriteFile(page, []byte(buildPage("nb", ch.Library, ch.Outputs)), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, img, err := b.render(page, filepath.Join(dir, "nb.png"))
	if err != nil {
		t.Fatal(err)
	}
	ms := measure(img, rep)
	if len(ms) != 3 {
		t.Fatalf("%d charts measured, want 3", len(ms))
	}
	for _, m := range ms {
		t.Logf("%s: %.4f%% in %v, drawn at %gx%g in a %gx%g div", m.Chart.ID, 100*m.Fraction, m.Rect, m.Chart.Width, m.Chart.Height, m.Chart.BoxW, m.Chart.BoxH)
		if m.Fraction < defaultMinFraction {
			t.Errorf("%s: %.4f%% drawn, below the threshold", m.Chart.ID, 100*m.Fraction)
		}
		if m.Clipped {
			t.Errorf("%s: plot area %v lies outside the screenshot", m.Chart.ID, m.Rect)
		}
		if ns := notes(m.Chart); len(ns) > 0 {
			t.Errorf("%s: %v", m.Chart.ID, ns)
		}
	}
	if w := ms[0].Chart.BoxW; w > 480 {
		t.Errorf("the first small chart is %g px wide, want about half the row", w)
	}
	if ms[2].Fraction < 0.5 {
		t.Errorf("the heatmap fills %.1f%% of its grid, want most of it", 100*ms[2].Fraction)
	}
}

func seq(n int) string {
	s := ""
	for i := 0; i < n; i++ {
		if i > 0 {
			s += ","
		}
		s += `"` + itoa(i) + `"`
	}
	return s
}

// cells is n×n heatmap cells [x, y, value] with values in [0, 1].
func cells(n int) string {
	s := make([]byte, 0, n*n*12)
	for y := 0; y < n; y++ {
		for x := 0; x < n; x++ {
			if len(s) > 0 {
				s = append(s, ',')
			}
			s = append(s, '[')
			s = append(s, itoa(x)...)
			s = append(s, ',')
			s = append(s, itoa(y)...)
			s = append(s, ",0."...)
			s = append(s, itoa((x*7+y*13)%10)...)
			s = append(s, ']')
		}
	}
	return string(s)
}

var itoa = strconv.Itoa

// TestNotebookChartsDrawThemselvesInChromium renders real
// notebook.ChartHTML outputs, each displayed alone as
// gonbui.DisplayHTML(notebook.ChartHTML(…)) would: the first carries the
// compressed library, the others only a loader. Placed before the one
// that carries the library, after it, and alone on a page, every chart
// must draw — a reopened notebook renders its outputs in any order.
func TestNotebookChartsDrawThemselvesInChromium(t *testing.T) {
	b := needBrowser(t)
	line := notebook.LineOption("loss", "step", "loss", false,
		notebook.Series{Name: "loss", X: []float64{1, 2, 3, 4, 5}, Y: []float64{4, 3, 2.5, 2.2, 2}})
	withLib := notebook.ChartHTML("nb-with-library", line, 240, "loss chart (needs JavaScript)")
	before := notebook.ChartHTML("nb-before", line, 240, "loss chart (needs JavaScript)")
	after := notebook.ChartHTML("nb-after", notebook.BarOption("kernel time", "ms", []string{"matmul", "softmax"}, []float64{3, 1}), 200, "bars")
	if !strings.Contains(withLib, dataMarker) || strings.Contains(before, dataMarker) {
		t.Fatal("want the library in the first chart only")
	}
	pages := map[string][]string{
		"alone":     {withLib},
		"any-order": {before, withLib, after},
	}
	for name, outs := range pages {
		var cell []map[string]any
		for _, h := range outs {
			cell = append(cell, display("display_data", h))
		}
		ch, err := extract(nbJSON(t, cell))
		if err != nil {
			t.Fatal(err)
		}
		if !ch.HasLibrary || ch.Library != "" {
			t.Fatalf("%s: HasLibrary %v, a separate library output %v", name, ch.HasLibrary, ch.Library != "")
		}
		dir := t.TempDir()
		page := filepath.Join(dir, name+".html")
		if err := os.WriteFile(page, []byte(buildPage(name, "", ch.Outputs)), 0o644); err != nil {
			t.Fatal(err)
		}
		rep, img, err := b.render(page, filepath.Join(dir, name+".png"))
		if err != nil {
			t.Fatal(err)
		}
		ms := measure(img, rep)
		if len(ms) != len(outs) {
			t.Fatalf("%s: %d charts measured, want %d", name, len(ms), len(outs))
		}
		for _, m := range ms {
			t.Logf("%s/%s: %.4f%% drawn, echarts instance %v", name, m.Chart.ID, 100*m.Fraction, m.Chart.Drawn)
			if !m.Chart.Drawn || m.Fraction < defaultMinFraction {
				t.Errorf("%s/%s: not drawn (instance %v, %.4f%%)", name, m.Chart.ID, m.Chart.Drawn, 100*m.Fraction)
			}
		}
	}
}

// TestTitleOverlapInChromium: the check measures where echarts laid out
// a chart's title and legend. go-echarts' default legend (top centre,
// here named like the title, as the heatmap's series was) sits on the
// title and is reported; the notebook's heatmap and histogram options
// are clear of it.
func TestTitleOverlapInChromium(t *testing.T) {
	b := needBrowser(t)
	title := "W: Tensor [8 8] float32 on cpu, requires grad"
	bad := `{"animation":false,"legend":{},"title":{"text":"` + title + `","left":"center","textStyle":{"fontSize":13}},` +
		`"grid":[{"left":"50","top":"40","right":"90","bottom":"30"}],"xAxis":[{"type":"value"}],"yAxis":[{"type":"value"}],` +
		`"series":[{"name":"` + title + `","type":"line","data":[[0,1],[1,2]]}]}`
	vals := make([]float64, 64)
	for i := range vals {
		vals[i] = float64(i % 7)
	}
	outs := []map[string]any{
		display("display_data", controlChart("overlapping", bad, 300, true)),
		display("display_data", notebook.ChartHTML("heatmap", notebook.HeatmapOption(title, 8, 8, vals), 420, "")),
		display("display_data", notebook.ChartHTML("histogram", notebook.HistogramOption(title, vals, 20), 320, "")),
	}
	ch, err := extract(nbJSON(t, outs))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "overlap.html")
	if err := os.WriteFile(page, []byte(buildPage("overlap", assetLibrary(t), ch.Outputs)), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, _, err := b.render(page, filepath.Join(dir, "overlap.png"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Charts) != 3 {
		t.Fatalf("%d charts", len(rep.Charts))
	}
	for _, c := range rep.Charts {
		t.Logf("%s: boxes %v, notes %v", c.ID, c.Boxes, notes(c))
		if _, ok := c.Boxes["title"]; !ok || !c.Drawn {
			t.Errorf("%s: drawn %v, no title box measured (%s)", c.ID, c.Drawn, c.Error)
		}
		overlap := false
		for _, n := range notes(c) {
			overlap = overlap || strings.Contains(n, "overlaps")
		}
		if want := c.ID == "overlapping"; overlap != want {
			t.Errorf("%s: overlap reported %v, want %v", c.ID, overlap, want)
		}
	}
}
