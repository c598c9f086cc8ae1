package train

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/fmodel"
	"github.com/forgeml/forge/forge/half"
)

// TestSessionCommitAndLoad commits a trained run, loads it back bit for
// bit, commits again after changing one tensor (writing just that
// tensor), and reads the older revision.
func TestSessionCommitAndLoad(t *testing.T) {
	cfg := testRunConfig()
	dir := t.TempDir()
	s := openTest(t, dir, &cfg)
	defer s.Close()
	if _, err := s.Train(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	st1, err := s.Commit("three steps")
	if err != nil {
		t.Fatal(err)
	}
	nParams := len(s.Model().Params())
	if st1.Written != nParams+1 || st1.Parent != "" {
		t.Fatalf("first commit: %+v (%d params + tokenizer)", st1, nParams)
	}
	repo := filepath.Join(dir, RepositoryDir)
	snap, err := LoadRepository(repo, "")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Step != 3 || snap.Revision != st1.Hash || snap.Config.Model != s.Model().Config {
		t.Fatalf("snapshot: step %d revision %s config %+v", snap.Step, snap.Revision, snap.Config.Model)
	}
	want := s.Model().Params()
	for i, p := range snap.Model.Params() {
		if p.Name != want[i].Name || !slices.Equal(p.Tensor.Float32s(), want[i].Tensor.Float32s()) {
			t.Fatalf("%s differs after the round trip", p.Name)
		}
	}
	text := "It is a truth universally acknowledged"
	if !slices.Equal(snap.Tokenizer.Encode(text), s.Tokenizer().Encode(text)) {
		t.Fatal("the tokenizer differs after the round trip")
	}

	// Change one tensor: the second commit writes only it.
	norm := s.Model().NormF.Weight
	old := norm.Float32s()
	forge.NoGrad(func() { norm.CopyFrom(norm.MulScalar(0.5)) })
	st2, err := s.Commit("halve the final norm")
	if err != nil {
		t.Fatal(err)
	}
	if st2.Written != 1 || st2.Reused != nParams || st2.Parent != st1.Hash || st2.BytesWritten != fmodel.PageSize {
		t.Fatalf("second commit: %+v", st2)
	}
	prev, err := LoadRepository(repo, "HEAD~1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(prev.Model.NormF.Weight.Float32s(), old) {
		t.Fatal("HEAD~1 does not hold the norm as it was")
	}
	cur, _ := LoadRepository(repo, st2.Hash[:8])
	if !slices.Equal(cur.Model.NormF.Weight.Float32s(), norm.Float32s()) {
		t.Fatal("the new revision does not hold the changed norm")
	}
}

// TestCommitHalfPrecision stores float16 and bfloat16 and loads the
// values rounded to those types, exactly.
func TestCommitHalfPrecision(t *testing.T) {
	cfg := testRunConfig()
	dir := t.TempDir()
	s := openTest(t, dir, &cfg)
	defer s.Close()
	m := s.Model()
	for _, dt := range []string{"float16", "bfloat16"} {
		repo := filepath.Join(t.TempDir(), dt+".forge")
		st, err := CommitModel(repo, m, s.Tokenizer(), s.Config(), 0, CommitOptions{DType: dt})
		if err != nil {
			t.Fatal(err)
		}
		var f32 int64
		for _, p := range m.Params() {
			f32 += int64(4 * p.Tensor.Numel())
		}
		if st.Bytes*2 != f32 {
			t.Fatalf("%s stores %d bytes, want half of %d", dt, st.Bytes, f32)
		}
		snap, err := LoadRepository(repo, "")
		if err != nil {
			t.Fatal(err)
		}
		got := snap.Model.Params()
		for i, p := range m.Params() {
			v, g := p.Tensor.Float32s(), got[i].Tensor.Float32s()
			for j := range v {
				var r float32
				if dt == "float16" {
					r = half.Float16FromBits(half.Float16Bits(v[j]))
				} else {
					r = half.BFloat16FromBits(half.BFloat16Bits(v[j]))
				}
				if g[j] != r && !(math.IsNaN(float64(r)) && math.IsNaN(float64(g[j]))) {
					t.Fatalf("%s %s[%d] = %v, want %v rounded to %v", dt, p.Name, j, g[j], v[j], r)
				}
			}
		}
	}
	if _, err := CommitModel(t.TempDir(), m, s.Tokenizer(), s.Config(), 0, CommitOptions{DType: "int4"}); err == nil || !strings.Contains(err.Error(), "want float32") {
		t.Fatalf("dtype int4: %v", err)
	}
}

// TestOpenRepositoryFineTunes opens a repository's path as a run: the run
// directory beside it starts from the repository's weights, tokenizer and
// config, trains, commits back to the repository, and resumes as a run.
func TestOpenRepositoryFineTunes(t *testing.T) {
	cfg := testRunConfig()
	dir := t.TempDir()
	base := openTest(t, filepath.Join(dir, "base"), &cfg)
	if _, err := base.Train(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(dir, "m.forge")
	st1, err := CommitModel(repo, base.Model(), base.Tokenizer(), base.Config(), 2, CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := base.Model().Params()
	base.Close()

	var log strings.Builder
	s, err := Open(repo, OpenOptions{Texts: testTexts(), Source: "test", NoCache: true, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if s.Dir() != RunDirOf(repo) || !strings.Contains(log.String(), "is a .forge repository") || !strings.Contains(log.String(), st1.Hash[:12]) {
		t.Fatalf("dir %s, log:\n%s", s.Dir(), log.String())
	}
	for i, p := range s.Model().Params() {
		if !slices.Equal(p.Tensor.Float32s(), want[i].Tensor.Float32s()) {
			t.Fatalf("%s does not start from the repository's weights", p.Name)
		}
	}
	if !slices.Equal(s.Tokenizer().Encode("Mr. Darcy"), base.Tokenizer().Encode("Mr. Darcy")) {
		t.Fatal("the run does not use the repository's tokenizer")
	}
	if _, err := s.Train(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	st2, err := s.Commit("fine-tuned")
	if err != nil {
		t.Fatal(err)
	}
	if st2.Parent != st1.Hash {
		t.Fatalf("the fine-tuned commit's parent is %s, want %s", st2.Parent, st1.Hash)
	}
	s.Close()
	if r, err := Check(RunDirOf(repo)); err != nil || len(r.Problems) != 0 {
		t.Fatalf("check of the run: %+v %v", r, err)
	}
	// Opening again resumes the run (it exists) and still commits there.
	s, err = Open(repo, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Resumed() || s.Trainer().StepCount() != 2 {
		t.Fatalf("resumed %v at step %d", s.Resumed(), s.Trainer().StepCount())
	}
	if abs, _ := filepath.Abs(repo); s.Repository() != abs {
		t.Fatalf("commits go to %s, want %s", s.Repository(), abs)
	}
	other := cfg
	other.Model.Layers = 3
	if _, err := Open(repo+"2", OpenOptions{From: repo, Config: &other}); err == nil || !strings.Contains(err.Error(), "another shape") {
		t.Fatalf("a config of another model: %v", err)
	}
}
