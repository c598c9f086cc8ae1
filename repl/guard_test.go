package repl

import (
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
)

// TestMemoryBudgetTranscript: a 37 GiB Zeros is refused in one line naming
// the size and the budget, and the session goes on; :set budget sets,
// shows and restores the budget, and refuses what is not a size.
func TestMemoryBudgetTranscript(t *testing.T) {
	t.Setenv("FORGE_MEMORY_AVAILABLE", "2147483648")
	defer forge.SetMemoryBudget(0)
	s, out, dir := newTestSession(t)
	got := transcript(t, s, out, `big := forge.Zeros(100000, 100000)
x := forge.Ones(2).Sum()
x.Item()
:set budget 64MiB
:set budget
y := forge.Zeros(8192, 4096)
:set budget lots
:set budget auto
y := forge.Zeros(8192, 4096)
y.Numel()`, dir)
	lines := strings.Split(got, "\n")
	want := []string{
		"forge> big := forge.Zeros(100000, 100000)",
		"error: forge: zeros: float32 [100000 100000] needs #.# GiB, over the memory budget of #.# GiB (available RAM); free tensors or raise the budget with forge.SetMemoryBudget (in the REPL: :set budget <size>)",
		"forge> x := forge.Ones(2).Sum()",
		"forge> x.Item()",
		"2",
		"forge> :set budget 64MiB",
		"budget #.# MiB",
		"forge> :set budget",
		"budget #.# MiB",
		"forge> y := forge.Zeros(8192, 4096)",
		"error: forge: zeros: float32 [8192 4096] needs #.# MiB, over the memory budget of #.# MiB (set with forge.SetMemoryBudget or :set budget); free tensors or raise the budget with forge.SetMemoryBudget (in the REPL: :set budget <size>)",
		"forge> :set budget lots",
		`error: budget wants a size (8GiB, 512MiB, 2G) or auto, got "lots" (usage: :set [name [value]])`,
		"forge> :set budget auto",
		"budget auto (#.# GiB, available RAM)",
		"forge> y := forge.Zeros(8192, 4096)",
		"forge> y.Numel()",
		"33554432",
	}
	wantLines(t, lines, want, got)
	// The sizes, which the transcript masks.
	if err := s.Eval(":set budget 1.5GiB"); err != nil {
		t.Fatal(err)
	}
	if b, src := forge.MemoryBudget(); b != 3<<29 || src != "set" {
		t.Errorf(":set budget 1.5GiB: the budget is %d (%s)", b, src)
	}
	err := s.Eval("big := forge.Zeros(100000, 100000)")
	if err == nil || !strings.Contains(err.Error(), "needs 37.3 GiB, over the memory budget of 1.5 GiB (set") {
		t.Errorf("Zeros(100000, 100000) under a set 1.5 GiB budget: %v", err)
	}
}

// wantLines fails at the first line of a transcript that differs from want.
func wantLines(t *testing.T, lines, want []string, got string) {
	t.Helper()
	for i, w := range want {
		if i >= len(lines) || lines[i] != w {
			t.Fatalf("transcript line %d:\n got %q\nwant %q\nwhole:\n%s", i+1, at(lines, i), w, got)
		}
	}
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "<none>"
}

// TestTripwireTranscript: with :set tripwire on, the log of a negative is
// caught at the log, naming the input; off, it is a NaN again.
func TestTripwireTranscript(t *testing.T) {
	defer forge.SetTripwire(false)
	s, out, dir := newTestSession(t)
	got := transcript(t, s, out, `:set tripwire on
z := forge.FromSlice([]float32{-1, 2}).Log()
:set tripwire off
z := forge.FromSlice([]float32{-1, 2}).Log()`, dir)
	lines := strings.Split(got, "\n")
	want := []string{
		"forge> :set tripwire on",
		"tripwire on",
		"forge> z := forge.FromSlice([]float32{-1, 2}).Log()",
		"error: forge: tripwire: NaN from unary.log [2] → [2] (forward): 1 of 2 values not finite (input 2: z := forge.FromSlice([]float32{-1, 2}).Log())",
		"forge> :set tripwire off",
		"tripwire off",
		"forge> z := forge.FromSlice([]float32{-1, 2}).Log()",
		"",
	}
	wantLines(t, lines, want, got)
}
