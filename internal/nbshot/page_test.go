package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// nbJSON builds an executed notebook's JSON from cells given as lists of
// outputs (nil cells are markdown).
func nbJSON(t *testing.T, cells ...[]map[string]any) []byte {
	t.Helper()
	var cs []any
	for _, outs := range cells {
		if outs == nil {
			cs = append(cs, map[string]any{"cell_type": "markdown", "metadata": map[string]any{}, "source": []string{"# title\n", `<div class="forge-chart">not an output</div>`}})
			continue
		}
		cs = append(cs, map[string]any{"cell_type": "code", "execution_count": 1, "metadata": map[string]any{}, "source": "x", "outputs": outs})
	}
	b, err := json.Marshal(map[string]any{"nbformat": 4, "nbformat_minor": 5, "metadata": map[string]any{}, "cells": cs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func display(kind string, html any) map[string]any {
	return map[string]any{"output_type": kind, "metadata": map[string]any{}, "data": map[string]any{"text/html": html, "text/plain": "<IPython.core.display.HTML object>"}}
}

const (
	libA   = `<div class="forge-echarts-lib" style="display:none">echarts 5.6.0</div><script>/* A */</script>`
	libB   = `<div class="forge-echarts-lib" style="display:none">echarts 5.6.0</div><script>/* B */</script>`
	chart1 = `<div id="forge-loss-1" class="forge-chart" style="height:300px"></div><script>/* 1 */</script>`
	chart2 = `<div class="forge-box"><div id="forge-lr-2" class="forge-chart"></div><div id="forge-tps-3" class="forge-chart"></div></div>`
	chart3 = `<div id="forge-heatmap-4" class="forge-chart"></div>`
)

func TestExtract(t *testing.T) {
	data := nbJSON(t,
		nil,
		[]map[string]any{
			{"output_type": "stream", "name": "stdout", "text": []string{`class="forge-chart"` + "\n"}},
			display("display_data", `<table class="forge-table"></table>`),
		},
		[]map[string]any{
			display("display_data", []string{libA[:20], libA[20:]}), // multiline as a list
			display("display_data", chart1),
		},
		[]map[string]any{
			display("display_data", libB),
			display("display_data", []string{chart2}),
			{"output_type": "display_data", "metadata": map[string]any{}, "data": map[string]any{"image/png": "iVBOR"}},
			display("execute_result", chart3),
			{"output_type": "error", "ename": "E", "evalue": `class="forge-chart"`, "traceback": []string{}},
		},
	)
	c, err := extract(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Library != libA {
		t.Errorf("library = %q, want the first library output %q", c.Library, libA)
	}
	want := []output{{2, 1, chart1}, {3, 1, chart2}, {3, 3, chart3}}
	if len(c.Outputs) != len(want) {
		t.Fatalf("got %d chart outputs %+v, want %d", len(c.Outputs), c.Outputs, len(want))
	}
	for i, w := range want {
		if c.Outputs[i] != w {
			t.Errorf("output %d = %+v, want %+v", i, c.Outputs[i], w)
		}
	}
	if n := c.countCharts(); n != 4 {
		t.Errorf("countCharts = %d, want 4", n)
	}
}

func TestExtractErrors(t *testing.T) {
	if _, err := extract([]byte("{not json")); err == nil {
		t.Error("extract accepted broken JSON")
	}
	bad := nbJSON(t, []map[string]any{display("display_data", 42)})
	if _, err := extract(bad); err == nil || !strings.Contains(err.Error(), "cell 0 output 0") {
		t.Errorf("extract of a numeric text/html: err = %v, want one naming cell 0 output 0", err)
	}
	c, err := extract(nbJSON(t, nil, []map[string]any{display("display_data", "<b>no chart</b>")}))
	if err != nil || len(c.Outputs) != 0 || c.Library != "" || c.countCharts() != 0 {
		t.Errorf("a notebook without charts: %+v, %v", c, err)
	}
}

func TestBuildPage(t *testing.T) {
	outs := []output{{2, 1, chart1}, {3, 1, chart2}}
	page := buildPage(`03 <&> "x"`, libA, outs)
	pos := func(s string) int {
		t.Helper()
		i := strings.Index(page, s)
		if i < 0 {
			t.Fatalf("page lacks %q", s)
		}
		if strings.Count(page, s) != 1 {
			t.Errorf("page holds %q %d times, want once", s, strings.Count(page, s))
		}
		return i
	}
	// Order: the preprocessor hook in the head, then the outputs, the
	// library once after them (charts draw once the page is laid out), the
	// report element and its script.
	order := []int{
		pos("<title>03 &lt;&amp;&gt; &#34;x&#34;</title>"),
		pos("lib.registerPreprocessor(pre)"),
		pos("</head>"),
		pos(`data-cell="2" data-output="1"`),
		pos(chart1),
		pos(`data-cell="3" data-output="1"`),
		pos(chart2),
		pos(libA),
		pos(`<pre id="forge-report"></pre>`),
		pos(`getComponent("grid")`),
		pos("</html>"),
	}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Errorf("page part %d comes before part %d", i, i-1)
		}
	}
	for _, s := range []string{"width: 1000px", "background: #fff", ".forge-chart-placeholder { visibility: hidden"} {
		if !strings.Contains(page, s) {
			t.Errorf("page CSS lacks %q", s)
		}
	}
	if strings.Count(page, chartMarker) != 3 {
		t.Errorf("page holds %d chart divs, want 3", strings.Count(page, chartMarker))
	}
}

func TestLibraryFromJS(t *testing.T) {
	lib := libraryFromJS("var echarts = 1;")
	for _, s := range []string{libraryMarker, "if (!window.echarts)", "(function(define,module,exports){\nvar echarts = 1;\n}).call(window);"} {
		if !strings.Contains(lib, s) {
			t.Errorf("library output lacks %q:\n%s", s, lib)
		}
	}
}

func TestParseReport(t *testing.T) {
	dom := `<html><body><div>…</div><pre id="forge-report">{"width":1000,"height":2843,"dpr":1,"echarts":true,` +
		`"charts":[{"index":0,"id":"forge-a&amp;b","drawn":true,"area":"grid","x":83,"y":158.39,"w":870,"h":204,"width":960,"boxW":960}]}</pre><script>x</script></body></html>`
	r, err := parseReport(dom)
	if err != nil {
		t.Fatal(err)
	}
	if r.Width != 1000 || r.Height != 2843 || r.DPR != 1 || !r.ECharts || len(r.Charts) != 1 {
		t.Fatalf("report = %+v", r)
	}
	c := r.Charts[0]
	if c.ID != "forge-a&b" || !c.Drawn || c.Area != "grid" || c.X != 83 || c.Y != 158.39 || c.W != 870 || c.H != 204 || c.Width != 960 || c.BoxW != 960 {
		t.Errorf("chart = %+v", c)
	}
	for _, bad := range []string{
		"<html></html>",
		`<pre id="forge-report"></pre>`,
		`<pre id="forge-report">{"width":</pre>`,
		`<pre id="forge-report">{}`,
	} {
		if _, err := parseReport(bad); err == nil {
			t.Errorf("parseReport(%q) succeeded", bad)
		}
	}
}
