package kernels

import (
	"errors"
	"fmt"
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

// TestPrelude checks what Sources builds: the prelude files, each under
// its own name, then each file from its line 1, its text unchanged.
func TestPrelude(t *testing.T) {
	half, ops := readEmbedded("forge_half.h"), readEmbedded("forge_ops.h")
	for name, text := range Sources() {
		want := "#line 1 \"forge_half.h\"\n" + half + "#line 1 \"forge_ops.h\"\n" + ops +
			"#line 1 \"" + name + "\"\n" + readEmbedded(name)
		if text != want {
			t.Errorf("%s: Sources' text is not the prelude files + #line + file", name)
		}
	}
	if strings.Contains(reComment.ReplaceAllString(half+ops, ""), "kernel") {
		t.Error("the prelude declares a kernel (it would be in every library)")
	}
}

// TestNoLocalOpNumbers keeps the op numbers in the generated forge_ops.h:
// no kernel file numbers a backend op itself (a copy would silently go
// out of step when an op is added in Go).
func TestNoLocalOpNumbers(t *testing.T) {
	local := regexp.MustCompile(`\b[UBR]_[A-Z0-9_]+\s*=`)
	for _, name := range Files() {
		src := reComment.ReplaceAllString(readEmbedded(name), "")
		if m := local.FindString(src); m != "" {
			t.Errorf("%s: %q: the op numbers come from forge_ops.h (go generate ./kernels/)", name, m)
		}
	}
	// And the switches use them: every U_, B_ and R_ name a kernel uses is
	// one the header defines.
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b([UBR]_[A-Z0-9_]+) = \d+,`).FindAllStringSubmatch(readEmbedded("forge_ops.h"), -1) {
		defined[m[1]] = true
	}
	if len(defined) == 0 {
		t.Fatal("forge_ops.h defines no op numbers")
	}
	used := regexp.MustCompile(`\b[UBR]_[A-Z0-9_]+\b`)
	for _, name := range []string{"unary.metal", "binary.metal", "reduce.metal"} {
		ms := used.FindAllString(reComment.ReplaceAllString(readEmbedded(name), ""), -1)
		if len(ms) == 0 {
			t.Errorf("%s: uses no op number of forge_ops.h", name)
		}
		for _, m := range ms {
			if !defined[m] {
				t.Errorf("%s: %s is not an op number of forge_ops.h", name, m)
			}
		}
	}
}

var reComment = regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)

// TestNoLocalConversions keeps the storage-type conversions in the
// prelude: no kernel file defines its own float → bfloat rounding or
// bfloat → float widening.
func TestNoLocalConversions(t *testing.T) {
	for _, name := range Files() {
		src := reComment.ReplaceAllString(readEmbedded(name), "")
		for _, pat := range []string{"0x7fffu +", "as_type<ushort>(x)) << 16", "as_type<bfloat>(ushort("} {
			if strings.Contains(src, pat) {
				t.Errorf("%s: %q: use the prelude's forge_narrow / forge_widen / forge_bf16_bits / forge_bf16_float", name, pat)
			}
		}
	}
}

// TestPreludeLines checks that the emulator's parser counts each file's
// own lines after the prelude: a kernel's line is where the file names it.
func TestPreludeLines(t *testing.T) {
	for name, text := range Sources() {
		lines := strings.Split(readEmbedded(name), "\n")
		ks, err := emu.ParseKernels(name, text)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			if k.Line < 1 || k.Line > len(lines) || !strings.Contains(lines[k.Line-1], k.Name) {
				t.Errorf("%s: kernel %s at line %d, which does not name it", name, k.Name, k.Line)
			}
		}
	}
}

// TestCompileErrorLine: clang (the emulator's) reports an error in a
// kernel file with that file's name and own line number, past the prelude.
func TestCompileErrorLine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs clang")
	}
	src := "kernel void broken_f32(device float* x [[buffer(0)]],\n" +
		"                       uint i [[thread_position_in_grid]]) {\n" +
		"    x[i] = forge_widen(x[i]);\n" +
		"    x[i] = no_such_function(x[i]);\n" +
		"}\n"
	text := withPrelude(prelude(), "broken.metal", src)
	ks, err := emu.ParseKernels("broken.metal", text)
	if err != nil || len(ks) != 1 || ks[0].Line != 1 {
		t.Fatalf("ParseKernels = %+v, %v; want broken_f32 at line 1", ks, err)
	}
	_, err = emu.Open(map[string]string{"broken.metal": text}, emu.Options{CacheDir: t.TempDir()})
	if errors.Is(err, emu.ErrUnavailable) {
		t.Skip(err)
	}
	if err == nil {
		t.Fatal("a kernel calling an undeclared function compiled")
	}
	msg := err.Error()
	if want := fmt.Sprintf("broken.metal:%d:", 4); !strings.Contains(msg, want) || strings.Contains(msg, "forge_half.h") || strings.Contains(msg, "forge_ops.h") {
		t.Errorf("compile error does not name %s (and only it):\n%s", want, msg)
	}
}
