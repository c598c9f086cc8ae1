// Command nbshot checks that the charts of executed notebooks really draw:
// it renders them in headless Chromium and counts the drawn pixels inside
// every chart's plot area. A blank or never-drawn chart fails.
//
//	go run ./internal/nbshot [flags] executed.ipynb…
//
// For each notebook it builds one standalone page: every output holding a
// chart (class="forge-chart") stacked in notebook order at a fixed width of
// 1000 px on white, then the notebook's own echarts library output once
// (last, so that charts draw only once the page is laid out), then a script
// that, once every chart div has an echarts instance, writes each chart's
// id and plot area (the cartesian grid's rectangle inset by 3 px, else the
// chart box less 10 % a side) into <pre id="forge-report">. Chromium runs
// twice per page under --virtual-time-budget: with --dump-dom to read that
// report, and with --screenshot over the whole page height. In the decoded
// PNG it counts, per chart, the plot-area pixels that are clearly coloured
// or dark — white, the light grey split lines and the mid grey axis lines
// do not count — and a chart whose fraction is below -min-fraction fails.
// It prints one line per chart and keeps the screenshot as
// DIR/<notebook>.png (-artifacts DIR; default: next to the executed
// notebook).
//
// Before any notebook it checks itself on a control page, built and
// measured the same way — one chart with data, one with axes but an empty
// series (its x axis line crossing the middle of the plot area), one chart
// div never drawn — and fails unless the first passes and the other two
// fail, so every run shows the check can fail on this machine. Its
// screenshot is kept as DIR/nbshot-control.png. The control runs a second
// time with require.js loaded first, as classic Notebook pages have it,
// and with the library output the notebooks carry: a library that let
// require.js's define() capture it would leave window.echarts unset and
// the drawn chart blank (checked by hand: an unwrapped echarts fails
// here); DIR/nbshot-control-requirejs.png.
package main

import (
	"flag"
	"fmt"
	"html"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// defaultMinFraction is the least share of a plot area's pixels that must
// be ink. Measured with Chromium 156 on the five notebooks and the control:
// the never-drawn and the empty-series charts ink 0 pixels (0 %); the
// faintest real chart is the roofline (scatter symbols only; its grey roof
// line is not ink) at 0.54 %, then the control's line at 1.26 % and the
// loss charts at 1.7-1.9 %; heatmaps reach 84-92 %. 0.2 % sits 2.7× below
// the faintest real chart and far above blank: in a 870×203 plot area it
// asks for 353 inked pixels, about a 2 px line across a fifth of the width.
const defaultMinFraction = 0.002

func main() {
	artifacts := flag.String("artifacts", "", "directory `DIR` for the screenshots DIR/<notebook>.png (default: next to each executed notebook)")
	minFrac := flag.Float64("min-fraction", defaultMinFraction, "least fraction of a plot area's pixels that must be drawn")
	chromium := flag.String("chromium", "", "Chromium executable (default: $FORGE_CHROMIUM, else chromium, chromium-browser, google-chrome on PATH)")
	echarts := flag.String("echarts", "", "echarts.min.js for the control page (default: notebook/assets/echarts.min.js of this module, else a notebook's own library output)")
	requirejs := flag.String("requirejs", "/usr/share/javascript/requirejs/require.min.js", "require.js, loaded ahead of the control page once more (classic Notebook's pages have it; Debian: libjs-requirejs)")
	timeout := flag.Duration("timeout", 60*time.Second, "limit for one Chromium run")
	keep := flag.Bool("keep", false, "keep the generated pages (they are kept anyway when a check fails)")
	outline := flag.Bool("outline", false, "also write <notebook>.areas.png: the screenshot with every measured area framed (green passed, red failed)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./internal/nbshot [flags] executed.ipynb…\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	c := &checker{minFrac: *minFrac, artifacts: *artifacts, keep: *keep, outline: *outline, requirejs: *requirejs}
	path := *chromium
	if path == "" {
		path = findBrowser()
	}
	if path == "" {
		fatalf("no Chromium found (tried %s); install Debian's chromium package or pass -chromium", strings.Join(browserNames, ", "))
	}
	c.browser = browser{path: path, timeout: *timeout}
	os.Exit(c.main(*echarts, flag.Args()))
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "nbshot: "+format+"\n", args...)
	os.Exit(1)
}

// checker holds one run's settings and state.
type checker struct {
	browser   browser
	minFrac   float64
	artifacts string
	keep      bool
	outline   bool
	requirejs string // require.js for the control's second page
	work      string // directory of the generated pages
	failed    bool
}

func (c *checker) main(echartsPath string, notebooks []string) int {
	start := time.Now()
	if c.artifacts != "" {
		if err := os.MkdirAll(c.artifacts, 0o755); err != nil {
			fatalf("%v", err)
		}
	}

	// Read every notebook first: a bad file fails before Chromium starts.
	type nb struct {
		path, name string
		charts     charts
	}
	var nbs []nb
	for _, p := range notebooks {
		data, err := os.ReadFile(p)
		if err != nil {
			fatalf("%v", err)
		}
		ch, err := extract(data)
		if err != nil {
			fatalf("%s: %v", p, err)
		}
		nbs = append(nbs, nb{path: p, name: strings.TrimSuffix(filepath.Base(p), ".ipynb"), charts: ch})
	}

	lib, from, err := controlLibrary(echartsPath, func() string {
		for _, n := range nbs {
			if n.charts.Library != "" {
				return n.charts.Library
			}
		}
		return ""
	})
	if err != nil {
		fatalf("control: %v", err)
	}
	if c.work, err = os.MkdirTemp("", "nbshot-"); err != nil {
		fatalf("%v", err)
	}
	if !c.control("nbshot-control", "", lib, from, filepath.Dir(notebooks[0])) {
		c.finish()
		fmt.Printf("nbshot: FAIL: the negative control failed: the measurement cannot tell a drawn chart from a blank one on this machine (%.1fs)\n", time.Since(start).Seconds())
		return 1
	}
	// Classic Notebook pages load require.js, whose global define()
	// captures a UMD library like echarts unless the library output
	// hides it: the control again under require.js, with the library
	// output the notebooks themselves carry (notebook.libraryHTML).
	if _, err := os.Stat(c.requirejs); err != nil {
		fatalf("control under require.js: %v (install Debian's libjs-requirejs or pass -requirejs)", err)
	}
	nbLib, nbFrom := "", "the first notebook's library output"
	for _, n := range nbs {
		if n.charts.Library != "" {
			nbLib = n.charts.Library
			break
		}
	}
	if nbLib == "" {
		nbLib, nbFrom = lib, from
	}
	head := fmt.Sprintf("<script src=\"file://%s\"></script>\n", html.EscapeString(c.requirejs))
	if !c.control("nbshot-control-requirejs", head, nbLib, nbFrom+", under require.js", filepath.Dir(notebooks[0])) {
		c.finish()
		fmt.Printf("nbshot: FAIL: under require.js (classic Notebook) the control's charts do not draw as they should (%.1fs)\n", time.Since(start).Seconds())
		return 1
	}

	charts := 0
	for _, n := range nbs {
		charts += c.notebook(n.path, n.name, n.charts)
	}
	c.finish()
	if c.failed {
		fmt.Printf("nbshot: FAIL (%d notebooks, %d charts, %.1fs)\n", len(nbs), charts, time.Since(start).Seconds())
		return 1
	}
	fmt.Printf("nbshot: ok (%d notebooks, %d charts, threshold %.2f%%, %.1fs)\n", len(nbs), charts, 100*c.minFrac, time.Since(start).Seconds())
	return 0
}

// finish removes the generated pages unless they should be kept.
func (c *checker) finish() {
	if c.failed || c.keep {
		fmt.Printf("nbshot: generated pages kept in %s\n", c.work)
		return
	}
	os.RemoveAll(c.work)
}

// controlLibrary is the echarts library output for the control page: the
// given file, else the module's notebook/assets/echarts.min.js, else a
// notebook's own library output.
func controlLibrary(path string, fromNotebooks func() string) (lib, from string, err error) {
	if path == "" {
		if root := moduleRoot(); root != "" {
			p := filepath.Join(root, "notebook", "assets", "echarts.min.js")
			if _, err := os.Stat(p); err == nil {
				path = p
			}
		}
	}
	if path != "" {
		js, err := os.ReadFile(path)
		if err != nil {
			return "", "", err
		}
		return libraryFromJS(string(js)), path, nil
	}
	if lib := fromNotebooks(); lib != "" {
		return lib, "the first notebook's library output", nil
	}
	return "", "", fmt.Errorf("no echarts library: pass -echarts")
}

// moduleRoot is the nearest directory at or above the working directory
// holding a go.mod, or "".
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

// pngPath is where the screenshot of a page named name goes.
func (c *checker) pngPath(name, nbDir string) string {
	dir := c.artifacts
	if dir == "" {
		dir = nbDir
	}
	return filepath.Join(dir, name+".png")
}

// control renders and judges the control page; false when the measurement
// does not tell its charts apart.
func (c *checker) control(name, head, lib, from, nbDir string) bool {
	page := filepath.Join(c.work, name+".html")
	if err := os.WriteFile(page, []byte(controlPageHead(head, lib)), 0o644); err != nil {
		fatalf("%v", err)
	}
	t := time.Now()
	rep, img, err := c.browser.render(page, c.pngPath(name, nbDir))
	if err != nil {
		fmt.Printf("nbshot: control: %v\n", err)
		c.failed = true
		return false
	}
	ms := measure(img, rep)
	c.writeOutline(c.pngPath(name, nbDir), img, ms)
	for _, m := range ms {
		// "drawn" and "blank", not ok/FAIL: two of the three must measure
		// blank, and a log search for FAIL should find real failures only.
		seen, want := "blank", "blank"
		if m.Fraction >= c.minFrac {
			seen = "drawn"
		}
		if controlExpect[m.Chart.ID] {
			want = "drawn"
		}
		fmt.Printf("control  %-22s %8.4f%%  %-5s (must be %s; %d px inked in its %s area %dx%d; echarts instance: %v)\n",
			m.Chart.ID, 100*m.Fraction, seen, want, m.Ink, m.Chart.Area, m.Rect.Dx(), m.Rect.Dy(), m.Chart.Drawn)
	}
	problems := judgeControl(ms, c.minFrac)
	for _, p := range problems {
		fmt.Printf("nbshot: control: %s\n", p)
	}
	if len(problems) > 0 {
		c.failed = true
		return false
	}
	fmt.Printf("control  drawn, empty and undrawn charts told apart (%.1fs, library from %s)\n", time.Since(t).Seconds(), from)
	return true
}

func verdict(pass bool) string {
	if pass {
		return "ok"
	}
	return "FAIL"
}

// notebook checks one executed notebook and returns its number of charts.
func (c *checker) notebook(path, name string, ch charts) int {
	n := ch.countCharts()
	if n == 0 {
		fmt.Printf("%s  no charts, nothing to draw\n", name)
		return 0
	}
	if !ch.HasLibrary {
		// Rendered all the same: the screenshot and the blank charts show it.
		fmt.Printf("nbshot: FAIL %s: %d charts but no echarts library output (%s): a reader's browser would draw none\n", name, n, libraryMarker)
		c.failed = true
	}
	page := filepath.Join(c.work, name+".html")
	if err := os.WriteFile(page, []byte(buildPage(name, ch.Library, ch.Outputs)), 0o644); err != nil {
		fatalf("%v", err)
	}
	t := time.Now()
	shot := c.pngPath(name, filepath.Dir(path))
	rep, img, err := c.browser.render(page, shot)
	if err != nil {
		fmt.Printf("nbshot: FAIL %s: %v\n", name, err)
		c.failed = true
		return n
	}
	if len(rep.Charts) != n {
		fmt.Printf("nbshot: FAIL %s: the page has %d chart divs, the notebook's outputs %d\n", name, len(rep.Charts), n)
		c.failed = true
	}
	seen := map[string]int{}
	ms := measure(img, rep)
	c.writeOutline(shot, img, ms)
	for _, m := range ms {
		seen[m.Chart.ID]++
		if m.Clipped {
			fmt.Printf("nbshot: FAIL %s: chart %s lies partly outside the %dx%d screenshot (plot area %v)\n", name, m.Chart.ID, img.Bounds().Dx(), img.Bounds().Dy(), m.Rect)
			c.failed = true
		}
		ok := m.Fraction >= c.minFrac
		fmt.Printf("%s  %-26s %8.4f%%  %-4s (%d px inked in its %s area %dx%d)\n", name, m.Chart.ID, 100*m.Fraction, verdict(ok), m.Ink, m.Chart.Area, m.Rect.Dx(), m.Rect.Dy())
		if !ok {
			c.failed = true
			why := ""
			if !m.Chart.Drawn {
				why = " (echarts never drew it)"
			}
			if m.Chart.Error != "" {
				why += " (" + m.Chart.Error + ")"
			}
			fmt.Printf("nbshot: FAIL %s: chart %s is blank: %.4f%% of its %dx%d plot area drawn, threshold %.2f%%%s\n",
				name, m.Chart.ID, 100*m.Fraction, m.Rect.Dx(), m.Rect.Dy(), 100*c.minFrac, why)
		}
	}
	for _, m := range ms {
		for _, note := range notes(m.Chart) {
			fmt.Printf("nbshot: note %s: chart %s: %s\n", name, m.Chart.ID, note)
		}
	}
	for id, k := range seen {
		if k > 1 {
			fmt.Printf("nbshot: note %s: %d chart divs share the id %s (a browser draws only the first)\n", name, k, id)
		}
	}
	fmt.Printf("%s  %d charts, %dx%d page, screenshot %s (%.1fs)\n", name, n, img.Bounds().Dx(), img.Bounds().Dy(), shot, time.Since(t).Seconds())
	return n
}

// writeOutline writes, with -outline, the screenshot shot with its measured
// areas framed next to it as <name>.areas.png.
func (c *checker) writeOutline(shot string, img image.Image, ms []measurement) {
	if !c.outline {
		return
	}
	p := strings.TrimSuffix(shot, ".png") + ".areas.png"
	f, err := os.Create(p)
	if err == nil {
		err = png.Encode(f, outlined(img, ms, c.minFrac))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Printf("nbshot: outline: %v\n", err)
	}
}

// notes are remarks on a chart that do not fail it.
func notes(c chartReport) []string {
	var ns []string
	if c.Drawn && (math.Abs(c.Width-c.BoxW) > 1 || math.Abs(c.Height-c.BoxH) > 1) {
		ns = append(ns, fmt.Sprintf("drawn at %gx%g in a %gx%g div (a resize was missed)", c.Width, c.Height, c.BoxW, c.BoxH))
	}
	if c.Progressive {
		ns = append(ns, "a series kept progressive rendering despite the page's preprocessor")
	}
	for _, other := range []string{"legend", "visualMap"} {
		t, ok1 := c.Boxes["title"]
		o, ok2 := c.Boxes[other]
		if ok1 && ok2 && t.overlaps(o) {
			ns = append(ns, fmt.Sprintf("the title %v overlaps the %s %v", t, other, o))
		}
	}
	return ns
}
