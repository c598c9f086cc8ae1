package train

import (
	"math"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/optim"
)

// A step whose gradient norm is not finite is skipped on the device: no
// weight and no moment changes, the step is not counted, the record says
// so; the next finite step is step 1 with the bias corrections of t = 1.
// The same with Muon (its momenta included).
func TestStepSkipsNonFiniteGradient(t *testing.T) {
	for _, name := range []string{"adamw", "muon"} {
		t.Run(name, func(t *testing.T) { testStepSkipsNonFinite(t, name) })
	}
}

func testStepSkipsNonFinite(t *testing.T, optimizer string) {
	cfg := testRunConfig()
	cfg.Optimizer = optimizer
	cfg.Model.Dropout = 0
	cfg.LR, cfg.Warmup, cfg.Schedule = 1e-3, 0, "constant"
	g := forge.NewGenerator(5)
	T := cfg.Model.Context
	x := g.RandInt(0, cfg.Model.Vocab, cfg.Batch, T).Int32s()
	y := g.RandInt(0, cfg.Model.Vocab, cfg.Batch, T).Int32s()
	m, err := gpt.New(cfg.Model, 1)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(cfg, m, fixedBatch{x, y}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := m.Blocks[0].MLP.Down.Weight
	good := w.Float32s()
	bad := append([]float32(nil), good...)
	bad[3] = float32(math.Inf(1))
	forge.NoGrad(func() { w.CopyFrom(forge.FromSlice(bad, w.Shape()...)) })
	snapshot := func() [][]float32 {
		var out [][]float32
		for _, p := range m.Params() {
			out = append(out, p.Tensor.Float32s())
		}
		for _, x := range optimTensors(t, tr.Opt) {
			out = append(out, x.Float32s())
		}
		return out
	}
	before := snapshot()
	met := tr.Step()
	if !met.Skipped || !(math.IsNaN(met.GradNorm) || math.IsInf(met.GradNorm, 0)) || met.Step != 0 || tr.StepCount() != 0 {
		t.Fatalf("non-finite gradient: record %+v, step count %d; want a skipped step 0", met, tr.StepCount())
	}
	after := snapshot()
	for i := range before {
		for j := range before[i] {
			if math.Float32bits(before[i][j]) != math.Float32bits(after[i][j]) {
				t.Fatalf("a skipped step changed tensor %d element %d: %v → %v", i, j, before[i][j], after[i][j])
			}
		}
	}
	// Repaired, the next step is the first: the same as a fresh trainer's.
	forge.NoGrad(func() { w.CopyFrom(forge.FromSlice(good, w.Shape()...)) })
	met = tr.Step()
	m2, _ := gpt.New(cfg.Model, 1)
	tr2, _ := NewTrainer(cfg, m2, fixedBatch{x, y}, nil)
	want := tr2.Step()
	if met.Skipped || met.Step != 1 || met.Loss != want.Loss || met.GradNorm != want.GradNorm {
		t.Fatalf("after the skip: %+v, a fresh trainer's first step %+v", met, want)
	}
	got, ref := m.Blocks[1].MLP.Up.Weight.Float32s(), m2.Blocks[1].MLP.Up.Weight.Float32s()
	for i := range ref {
		if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
			t.Fatalf("after the skip, weight element %d is %v, a fresh trainer's %v", i, got[i], ref[i])
		}
	}
}

// optimTensors returns the optimizer's state tensors: AdamW's moments and
// Muon's momenta.
func optimTensors(t *testing.T, opt optim.Optimizer) []*forge.Tensor {
	adam, muon, err := optimizers(opt)
	if err != nil {
		t.Fatal(err)
	}
	st := adam.State()
	out := append(st.M, st.V...)
	if muon != nil {
		out = append(out, muon.State().Momentum...)
	}
	return out
}
