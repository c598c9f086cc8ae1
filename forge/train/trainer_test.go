package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
)

// Accumulating two micro-batches of 2 must update the weights as one
// batch of 4 does (the loss is a mean over equally many tokens).
func TestGradAccumulationEqualsLargerBatch(t *testing.T) {
	cfg := testRunConfig()
	cfg.Model.Dropout = 0
	cfg.LR, cfg.Warmup, cfg.Schedule = 1e-3, 0, "constant"
	g := forge.NewGenerator(3)
	T := cfg.Model.Context
	x := g.RandInt(0, cfg.Model.Vocab, 4, T).Int32s()
	y := g.RandInt(0, cfg.Model.Vocab, 4, T).Int32s()

	// Adam is blind to the gradient's scale, so compare the step's loss
	// and gradient norm too: a missing 1/accum would double the norm.
	type out struct {
		w          []float32
		loss, norm float64
	}
	run := func(batch, accum int, src Batches) out {
		c := cfg
		c.Batch, c.GradAccum = batch, accum
		m, _ := gpt.New(c.Model, 1)
		tr, err := NewTrainer(c, m, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		first := tr.Step()
		tr.Step()
		return out{m.Blocks[1].MLP.Down.Weight.Float32s(), first.Loss, first.GradNorm}
	}
	whole := run(4, 1, fixedBatch{x, y})
	halves := &alternating{batches: [][2][]int32{{x[:2*T], y[:2*T]}, {x[2*T:], y[2*T:]}}}
	acc := run(2, 2, halves)
	if math.Abs(whole.loss-acc.loss) > 1e-6*whole.loss || math.Abs(whole.norm-acc.norm) > 1e-5*whole.norm {
		t.Errorf("loss %g vs %g, grad norm %g vs %g (whole batch vs accumulated)", whole.loss, acc.loss, whole.norm, acc.norm)
	}
	worst := 0.0
	for i := range whole.w {
		worst = max(worst, math.Abs(float64(whole.w[i]-acc.w[i])))
	}
	if worst > 1e-6 {
		t.Errorf("accumulated and whole-batch weights differ by %g", worst)
	}
}

type alternating struct {
	batches [][2][]int32
	i       int
}

func (a *alternating) Next() (x, y []int32) {
	b := a.batches[a.i%len(a.batches)]
	a.i++
	return b[0], b[1]
}

// TestDivergenceStops: with a learning rate that blows the model up, Run
// stops after MaxNonFinite non-finite steps in a row with an error that
// names the step and the first parameter whose gradient is not finite;
// Session.Train then saves nothing, so the last checkpoint stays the
// good one, and a Save of non-finite weights is refused.
func TestDivergenceStops(t *testing.T) {
	cfg := testRunConfig()
	cfg.SaveEvery, cfg.EvalEvery, cfg.GradClip = 0, 0, 0
	cfg.MaxNonFinite = 2
	s := openTest(t, t.TempDir(), &cfg)
	defer s.Close()
	if _, err := s.Train(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	s.trainer.SetLR(1e30)
	done, err := s.Train(context.Background(), 50)
	if !errors.Is(err, ErrDiverged) {
		t.Fatalf("after %d steps at lr 1e30: %v", done, err)
	}
	msg := err.Error()
	if done >= 50 || !strings.Contains(msg, "2 steps in a row") || !strings.Contains(msg, fmt.Sprintf("at step %d", s.trainer.StepCount())) ||
		!strings.Contains(msg, "first non-finite gradient: ") || strings.Contains(msg, "\n") {
		t.Errorf("stopped after %d steps: %q", done, msg)
	}
	t.Logf("%d steps, then: %s", done, msg)
	latest, _ := os.ReadFile(filepath.Join(s.dir, LatestFile))
	if strings.TrimSpace(string(latest)) != "step-000002" {
		t.Errorf("a diverged run was checkpointed: latest %q", latest)
	}
	// Whatever lr 1e30 left in the weights, a NaN in one is refused by name.
	p := s.model.Params()[1]
	vals := p.Tensor.Float32s()
	vals[0] = float32(math.NaN())
	forge.NoGrad(func() { p.Tensor.CopyFrom(forge.FromSlice(vals, p.Tensor.Shape()...)) })
	q := s.model.Params()[2] // and an infinity in another
	qv := q.Tensor.Float32s()
	qv[0] = float32(math.Inf(1))
	forge.NoGrad(func() { q.Tensor.CopyFrom(forge.FromSlice(qv, q.Tensor.Shape()...)) })
	if bad := NonFiniteParams(s.model); !slices.Contains(bad, p.Name) || !slices.Contains(bad, q.Name) {
		t.Fatalf("NonFiniteParams %v misses %s or %s", bad, p.Name, q.Name)
	}
	if err := s.Save(); err == nil || !strings.Contains(err.Error(), "NaN or infinity") {
		t.Errorf("saving non-finite weights: %v", err)
	}
	// A non-finite step or two among good ones is not a divergence.
	tr := s.trainer
	tr.nonFinite = 0
	for _, m := range []Metrics{{Step: 1, Loss: math.Inf(1)}, {Step: 2, Loss: 1}, {Step: 3, Loss: math.NaN()}, {Step: 4, Loss: 1, Skipped: false}} {
		if err := tr.checkFinite(m); err != nil {
			t.Errorf("step %d: %v", m.Step, err)
		}
	}
}

// TestHistoryLastVal: the latest record with a validation loss, a step-0
// evaluation included, or nil.
func TestHistoryLastVal(t *testing.T) {
	v0, v2 := 3.0, 2.5
	h := History{Steps: []Metrics{{Step: 0, ValLoss: &v0}, {Step: 1}, {Step: 2, ValLoss: &v2}, {Step: 3}}}
	if m := h.LastVal(); m == nil || m.Step != 2 || *m.ValLoss != 2.5 {
		t.Errorf("got %+v", m)
	}
	h.Steps = h.Steps[:2]
	if m := h.LastVal(); m == nil || m.Step != 0 {
		t.Errorf("an evaluation at step 0: got %+v", m)
	}
	if m := (&History{}).LastVal(); m != nil {
		t.Errorf("empty history: %+v", m)
	}
}

// TestRunNoEval: RunOptions.NoEval computes no validation loss even where
// EvalEvery asks for one; the plain Run does.
func TestRunNoEval(t *testing.T) {
	cfg := testRunConfig()
	cfg.EvalEvery = 1
	s := openTest(t, t.TempDir(), &cfg)
	defer s.Close()
	if _, err := s.TrainWith(context.Background(), 2, RunOptions{NoEval: true}); err != nil {
		t.Fatal(err)
	}
	for _, m := range s.trainer.History.Steps {
		if m.ValLoss != nil {
			t.Errorf("step %d has a validation loss with NoEval", m.Step)
		}
	}
	if _, err := s.Train(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if s.trainer.History.LastVal() == nil {
		t.Error("no validation loss without NoEval")
	}
}

// TestNonFiniteParams: a fresh model has none; an infinity planted in one
// parameter and a NaN in another are named, and no others.
func TestNonFiniteParams(t *testing.T) {
	cfg := testRunConfig()
	m, err := gpt.New(cfg.Model, 1)
	if err != nil {
		t.Fatal(err)
	}
	if bad := NonFiniteParams(m); bad != nil {
		t.Fatalf("fresh model: %v", bad)
	}
	ps := m.Params()
	for i, v := range map[int]float64{1: math.Inf(-1), 3: math.NaN()} {
		vals := ps[i].Tensor.Float32s()
		vals[len(vals)-1] = float32(v)
		forge.NoGrad(func() { ps[i].Tensor.CopyFrom(forge.FromSlice(vals, ps[i].Tensor.Shape()...)) })
	}
	if bad := NonFiniteParams(m); !slices.Equal(bad, []string{ps[1].Name, ps[3].Name}) {
		t.Errorf("got %v, want [%s %s]", bad, ps[1].Name, ps[3].Name)
	}
}

// TestMemoryLedger: on the CPU every step records its memory ledger: each
// phase's peak at least what was live at its end; the forward's live
// memory above the optimizer's (the micro-batch's activations are freed
// before the update); the optimizer's at least the weights, gradients and
// AdamW moments of the parameters the CPU counts (4096 elements or more);
// and the memory series for :plot and the dashboard.
func TestMemoryLedger(t *testing.T) {
	cfg := testRunConfig()
	s := openTest(t, t.TempDir(), &cfg)
	defer s.Close()
	if _, err := s.TrainWith(context.Background(), 2, RunOptions{NoEval: true}); err != nil {
		t.Fatal(err)
	}
	var counted int64
	for _, p := range nn.Tensors(s.model) {
		if n := int64(p.Numel()); n >= 4096 {
			counted += 16 * n
		}
	}
	if counted == 0 {
		t.Fatal("the test model has no parameter the CPU counts")
	}
	for _, m := range s.trainer.History.Steps {
		mem := m.Memory
		switch {
		case mem == nil:
			t.Fatalf("step %d: no memory ledger", m.Step)
		case mem.ForwardPeak < mem.ForwardLive || mem.BackwardPeak < mem.BackwardLive || mem.OptimizerPeak < mem.OptimizerLive:
			t.Errorf("step %d: a peak below its live memory: %+v", m.Step, *mem)
		case mem.ForwardLive <= mem.OptimizerLive:
			t.Errorf("step %d: the forward holds %d bytes, the update %d: activations not freed", m.Step, mem.ForwardLive, mem.OptimizerLive)
		case mem.OptimizerLive < counted:
			t.Errorf("step %d: %d bytes live after the update, below the %d of weights, gradients and moments", m.Step, mem.OptimizerLive, counted)
		}
	}
	steps, mb, err := s.trainer.History.Series("memory")
	if err != nil || len(steps) != 2 || mb[1] != float64(s.trainer.History.Steps[1].Memory.Peak())/1e6 {
		t.Errorf("memory series: %v %v %v", steps, mb, err)
	}
}
