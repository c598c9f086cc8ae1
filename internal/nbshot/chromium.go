package main

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// browserNames are the executables tried, in order, when -chromium is not
// given.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// findBrowser returns $FORGE_CHROMIUM when set (e.g. Chrome on a Mac,
// which is not on PATH), else the path of a Chromium on PATH, or "".
func findBrowser() string {
	if p := os.Getenv("FORGE_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range browserNames {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// browser runs headless Chromium on local pages.
type browser struct {
	path    string
	timeout time.Duration
}

// run runs chromium once on page with the given window height and extra
// flags, each run with a fresh profile, and returns its stdout.
func (b browser) run(page string, height int, extra ...string) ([]byte, error) {
	profile, err := os.MkdirTemp("", "nbshot-profile-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(profile)
	abs, err := filepath.Abs(page)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-default-apps", "--no-first-run", "--mute-audio",
		"--hide-scrollbars", "--force-device-scale-factor=1",
		"--user-data-dir=" + profile,
		fmt.Sprintf("--window-size=%d,%d", pageWidth, height),
		fmt.Sprintf("--virtual-time-budget=%d", budgetMS),
	}
	args = append(args, extra...)
	args = append(args, (&url.URL{Scheme: "file", Path: abs}).String())
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("no result after %v (under --virtual-time-budget a script that loops until Date.now() moves never ends)", b.timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v\n%s", filepath.Base(b.path), strings.Join(extra, " "), err, tail(stderr.String(), 2000))
	}
	return stdout.Bytes(), nil
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// maxHeight is the tallest window nbshot asks for (Chromium's compositor
// handles far more; a page this tall means something went wrong).
const maxHeight = 30000

// render loads page twice: once dumping the DOM to read the report, once
// taking a screenshot of the whole page height into pngPath, which it
// decodes.
func (b browser) render(page, pngPath string) (pageReport, image.Image, error) {
	dom, err := b.run(page, 800, "--dump-dom")
	if err != nil {
		return pageReport{}, nil, err
	}
	rep, err := parseReport(string(dom))
	if err != nil {
		return rep, nil, err
	}
	if rep.DPR != 1 {
		return rep, nil, fmt.Errorf("device pixel ratio %g, want 1", rep.DPR)
	}
	h := rep.Height
	if h < 100 {
		h = 100
	}
	if h > maxHeight {
		return rep, nil, fmt.Errorf("the page is %d px tall (more than %d)", h, maxHeight)
	}
	os.Remove(pngPath)
	if _, err := b.run(page, h, "--screenshot="+pngPath); err != nil {
		return rep, nil, err
	}
	f, err := os.Open(pngPath)
	if err != nil {
		return rep, nil, fmt.Errorf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return rep, nil, fmt.Errorf("screenshot %s: %v", pngPath, err)
	}
	if got := img.Bounds().Size(); got != image.Pt(pageWidth, h) {
		return rep, nil, fmt.Errorf("screenshot is %dx%d, want %dx%d", got.X, got.Y, pageWidth, h)
	}
	return rep, img, nil
}
