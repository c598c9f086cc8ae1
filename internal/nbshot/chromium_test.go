package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
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
