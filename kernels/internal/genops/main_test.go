package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const backendGo = "../../../forge/backend/backend.go"

// TestHeaderCurrent regenerates kernels/forge_ops.h from backend.go into a
// temporary directory (as go generate ./kernels/ does) and compares it with
// the committed one: an enum changed without a regeneration fails here.
func TestHeaderCurrent(t *testing.T) {
	out := filepath.Join(t.TempDir(), "forge_ops.h")
	if err := run(backendGo, out); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("../../forge_ops.h")
	if err != nil {
		t.Fatalf("%v (run go generate ./kernels/)", err)
	}
	if !bytes.Equal(have, want) {
		t.Errorf("kernels/forge_ops.h is out of date with forge/backend/backend.go: run go generate ./kernels/")
	}
}

// TestNewOpNumbered: an op added before the count gets the next number and
// its name from the table, and the ops before it keep theirs.
func TestNewOpNumbered(t *testing.T) {
	src, err := os.ReadFile(backendGo)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(src), "\t// NumUnaryOps ", "\tErfc // erfc(x)\n\t// NumUnaryOps ", 1)
	s = strings.Replace(s, `"sign", "round"}`, `"sign", "round", "erfc"}`, 1)
	if s == string(src) {
		t.Fatal("the edit did not apply: backend.go changed shape")
	}
	h, err := generate("backend.go", []byte(s))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"U_NEG = 0,", "U_SIGN = 18,", "U_ROUND = 19,", "U_ERFC = 20,", "// backend.Erfc: erfc(x)", "(NumUnaryOps = 21)"} {
		if !bytes.Contains(h, []byte(want)) {
			t.Errorf("header lacks %q:\n%s", want, h)
		}
	}
}

// TestRefused: shapes of the Go source that cannot be numbered for certain
// are errors, naming what is wrong.
func TestRefused(t *testing.T) {
	src, err := os.ReadFile(backendGo)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, old, new, want string
	}{
		{"explicit value", "\tExp                       // e^x", "\tExp = 5 // e^x", "must be bare names"},
		{"no count", "\t// NumBinaryOps is the number of binary ops (not an op).\n\tNumBinaryOps\n", "", "do not end in NumBinaryOps"},
		{"count not last", "\tReduceArgMin // index of the first minimum; dst is Int32\n\t// NumReduceOps is the number of reductions (not an op).\n\tNumReduceOps\n",
			"\tNumReduceOps\n\tReduceArgMin\n", "must be the last ReduceOp constant"},
		{"short names table", `"sign", "round"}`, `"sign"}`, "19 names for the 20 UnaryOp constants"},
		{"name not snake case", `"gelu_tanh"`, `"GeluTanh"`, "is not lower_snake_case"},
		{"names not literals", `"eq", "ne",`, `"eq", eqName,`, "not a string literal"},
	} {
		s := strings.Replace(string(src), c.old, c.new, 1)
		if s == string(src) {
			t.Errorf("%s: the edit did not apply: backend.go changed shape", c.name)
			continue
		}
		_, err := generate("backend.go", []byte(s))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}
