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

// TestMapRepository maps a revision's float32 weights in place: every
// parameter is the shard itself, read-only, and the model computes what
// the copied model computes, bit for bit. A trainer refuses it in one
// line; a float16 revision, which must be widened, is copied.
func TestMapRepository(t *testing.T) {
	cfg := testRunConfig()
	dir := t.TempDir()
	s := openTest(t, dir, &cfg)
	defer s.Close()
	if _, err := s.Train(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit("two steps"); err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(dir, RepositoryDir)
	mapped, err := MapRepository(repo, "")
	if err != nil {
		t.Fatal(err)
	}
	copied, err := LoadRepository(repo, "")
	if err != nil {
		t.Fatal(err)
	}
	params := mapped.Model.Params()
	if mapped.Mapped != len(params) || copied.Mapped != 0 {
		t.Fatalf("mapped %d of %d parameters; the copy says %d", mapped.Mapped, len(params), copied.Mapped)
	}
	for i, p := range params {
		if !p.Tensor.ReadOnly() || copied.Model.Params()[i].Tensor.ReadOnly() {
			t.Fatalf("%s: read-only %v mapped, %v copied", p.Name, p.Tensor.ReadOnly(), copied.Model.Params()[i].Tensor.ReadOnly())
		}
	}
	n := cfg.Model.Context
	ids := make([]int32, 2*n)
	for i := range ids {
		ids[i] = int32(i*7) % int32(cfg.Model.Vocab)
	}
	x := forge.FromSlice(ids[:n], 1, n)
	y := forge.FromSlice(ids[n:], 1, n)
	var lm, lc float64
	forge.NoGrad(func() { lm, lc = mapped.Model.Loss(x, y).Item(), copied.Model.Loss(x, y).Item() })
	if math.Float64bits(lm) != math.Float64bits(lc) {
		t.Fatalf("loss %v mapped, %v copied", lm, lc)
	}
	if _, err := NewTrainer(mapped.Config, mapped.Model, fixedBatch{ids[:n], ids[n:]}, nil); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("a trainer over the mapped model: %v", err)
	}

	half := filepath.Join(t.TempDir(), "half.forge")
	if _, err := CommitModel(half, s.Model(), s.Tokenizer(), s.Config(), 2, CommitOptions{DType: "float16"}); err != nil {
		t.Fatal(err)
	}
	h, err := MapRepository(half, "")
	if err != nil {
		t.Fatal(err)
	}
	if h.Mapped != 0 || h.Model.Params()[0].Tensor.ReadOnly() {
		t.Fatalf("a float16 revision: %d mapped", h.Mapped)
	}
}
