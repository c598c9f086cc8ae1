package kernels

import (
	"strings"
	"testing"
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
