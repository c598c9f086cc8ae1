package kernels

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/forgeml/forge/metal/emu"
)

func TestName(t *testing.T) {
	if got := Name("binary", "f32"); got != "binary_f32" {
		t.Fatalf("Name = %q", got)
	}
	if got := Name("unary", "gelu_tanh", "f32"); got != "unary_gelu_tanh_f32" {
		t.Fatalf("Name = %q", got)
	}
	for _, bad := range [][]string{{}, {""}, {"Binary"}, {"a__b"}, {"_a"}, {"a_"}, {"a-b"}, {"a", ""}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Name(%q) did not panic", bad)
				}
			}()
			Name(bad...)
		}()
	}
}

func TestSources(t *testing.T) {
	src := Sources()
	if len(src) == 0 {
		t.Fatal("no embedded sources")
	}
	for name, text := range src {
		if !strings.HasSuffix(name, ".metal") || !strings.Contains(text, "kernel void") {
			t.Errorf("%s: not a kernel source", name)
		}
	}
}

// TestDocListsEveryKernel keeps the package doc's table current: every
// kernel function the sources define (template instances by their
// host_name, with the head dimension written as dD) is named there.
func TestDocListsEveryKernel(t *testing.T) {
	doc, err := os.ReadFile("kernels.go")
	if err != nil {
		t.Fatal(err)
	}
	dim := regexp.MustCompile(`_d[0-9]+_`)
	for file, src := range Sources() {
		if !strings.Contains(string(doc), "//\t"+file) {
			t.Errorf("the package doc does not list %s", file)
		}
		ks, err := emu.ParseKernels(file, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			name := dim.ReplaceAllString(k.Name, "_dD_")
			if strings.HasPrefix(name, "attention_naive_") {
				name = "attention_naive_*_f32"
			}
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`).Match(doc) {
				t.Errorf("the package doc does not list kernel %s (%s)", name, file)
			}
		}
	}
}
