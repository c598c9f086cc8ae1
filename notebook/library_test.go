//go:build unix

package notebook

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/janpfeifer/gonb/gonbui/protocol"
)

var payloadRE = regexp.MustCompile(`<script type="application/x-forge-echarts" class="forge-echarts-data"[^>]*>([^<]*)</script>`)

// decodeLibrary returns the echarts source a fragment carries, "" if none.
func decodeLibrary(t *testing.T, h string) string {
	t.Helper()
	m := payloadRE.FindStringSubmatch(h)
	if m == nil {
		return ""
	}
	z, err := base64.StdEncoding.DecodeString(m[1])
	if err != nil {
		t.Fatalf("payload is not base64: %v", err)
	}
	r, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		t.Fatalf("payload is not gzip: %v", err)
	}
	src, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// TestChartHTMLCarriesLibrary: a chart fragment displayed on its own
// (gonbui.DisplayHTML(ChartHTML(…))) draws by itself: the first one
// carries the whole library, compressed, and every one a loader that
// finds it on the page.
func TestChartHTMLCarriesLibrary(t *testing.T) {
	t.Setenv(protocol.GONB_TMP_DIR_ENV, "")
	resetLibrary()
	opt := LineOption("loss", "step", "loss", false, Series{Name: "loss", X: []float64{1, 2}, Y: []float64{3, 2}})
	first := ChartHTML("a", opt, 200, "loss chart")
	if src := decodeLibrary(t, first); src != echartsJS {
		t.Fatalf("the first chart carries %d bytes of library, want echarts.min.js (%d bytes)", len(src), len(echartsJS))
	}
	if n := len(first); n > 500_000 {
		t.Errorf("the first chart is %d bytes: the library is not compressed", n)
	}
	second := ChartHTML("b", opt, 200, "loss chart")
	if decodeLibrary(t, second) != "" || len(second) > 10_000 {
		t.Errorf("the second chart re-sends the library (%d bytes)", len(second))
	}
	for _, h := range []string{first, second} {
		for _, want := range []string{"window.__forgeEcharts = function", "DecompressionStream", `querySelector("script.forge-echarts-data")`} {
			if !strings.Contains(h, want) {
				t.Errorf("chart lacks the loader's %q", want)
			}
		}
	}
}

// TestLibraryOncePerKernelSession: under GoNB every cell is a process;
// the library goes with the first chart of the kernel session only, and
// ResendLibrary sends it again.
func TestLibraryOncePerKernelSession(t *testing.T) {
	t.Setenv(protocol.GONB_TMP_DIR_ENV, t.TempDir())
	resetLibrary()
	opt := BarOption("t", "ms", []string{"a"}, []float64{1})
	if !isLibrary(ChartHTML("c1", opt, 0, "")) {
		t.Fatal("the session's first chart lacks the library")
	}
	resetLibrary() // a new cell: a new process of the same kernel session
	if isLibrary(ChartHTML("c2", opt, 0, "")) {
		t.Fatal("a later cell re-sent the library")
	}
	ResendLibrary()
	if !isLibrary(ChartHTML("c3", opt, 0, "")) {
		t.Fatal("ResendLibrary did not send it again")
	}
	if isLibrary(ChartHTML("c4", opt, 0, "")) {
		t.Fatal("sent twice after ResendLibrary")
	}
	os.Unsetenv(protocol.GONB_TMP_DIR_ENV)
}
