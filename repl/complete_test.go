package repl

import (
	"slices"
	"testing"
)

func TestComplete(t *testing.T) {
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	s, _, dir := newTestSession(t)
	if err := s.Open(dir+"/run", dir+"/micro.json", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Eval("myTensor := forge.Ones(2)"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		line, word string
		want       []string // candidates that must be among the answers
		none       bool
	}{
		{":st", "st", []string{"step "}, false},
		{":pl", "pl", []string{"plot "}, false},
		{":", "", []string{"help", "inspect", "plot", "quit"}, false},
		{":s", "s", []string{"sample", "save", "set", "step"}, false},
		{":plot lo", "lo", []string{"loss"}, false},
		{":plot loss --b", "--b", []string{"--browser "}, false},
		{":plot ", "", []string{"loss", "val_loss", "lr", "--last", "--browser"}, false},
		{":plot loss ", "", []string{"val_loss", "--browser"}, false},
		{":inspect ", "", []string{"wte.weight", "norm_f.weight", "blocks.0.attn.wo.weight"}, false},
		{":params blocks.0.at", "blocks.0.at", []string{"blocks.0.attn.wqkv.weight", "blocks.0.attn.wo.weight"}, false},
		{":new ti", "ti", []string{"tiny "}, false},
		{":bench mat", "mat", []string{"matmul "}, false},
		{":set li", "li", []string{"live "}, false},
		{"tr.StepC", "StepC", []string{"StepCount"}, false},
		{"x := model.Wte.W", "W", []string{"Weight"}, false},
		{"model.Wte.", "", []string{"Weight", "Forward", "Params"}, false},
		{"forge.Ran", "Ran", []string{"Randn", "Rand", "RandInt"}, false},
		{"myT", "myT", []string{"myTensor"}, false},
		{"myTensor.Su", "Su", []string{"Sum", "SumKeep"}, false},
		{"?forge.On", "On", []string{"Ones", "OnesLike"}, false},
		{"?:ru", "ru", []string{"run"}, false},
		{"", "", nil, true},
		{"x := ", "", nil, true},
		{"nosuch.Fo", "", nil, true},
	} {
		got, word := s.Complete(c.line, len(c.line))
		if c.none {
			if len(got) != 0 {
				t.Errorf("Complete(%q) = %q, want none", c.line, got)
			}
			continue
		}
		if word != c.word {
			t.Errorf("Complete(%q) word = %q, want %q", c.line, word, c.word)
		}
		for _, w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("Complete(%q) = %q, want %q among them", c.line, got, w)
			}
		}
	}
}

func TestIncomplete(t *testing.T) {
	for src, want := range map[string]bool{
		"f(":                                 true,
		"f()":                                false,
		"func f() {":                         true,
		"x := `raw":                          true,
		"x := \"(\"":                         false,
		"x := '{'":                           false,
		"/* open":                            true,
		"f() // (":                           false,
		"m := map[string]int{\n":             true,
		"m := map[string]int{\n\"a\": 1,\n}": false,
	} {
		if got := incomplete(src); got != want {
			t.Errorf("incomplete(%q) = %v, want %v", src, got, want)
		}
	}
}
