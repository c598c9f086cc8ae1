package train

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
)

// TestTripwireStopsStepUnapplied: with a parameter of block 1's attention
// set to NaN, a run with the tripwire on stops at step 1 with an error
// naming the first op that read it, block 1's scope and the parameter,
// and the step is not applied: every weight is what it was, the step
// count is 0, and the next run starts from the same batch. Both ways of
// asking for it (RunOptions, Config) are tried.
func TestTripwireStopsStepUnapplied(t *testing.T) {
	for _, how := range []string{"options", "config"} {
		t.Run(how, func(t *testing.T) {
			cfg := testRunConfig()
			var opts RunOptions
			if how == "config" {
				cfg.Tripwire = true
			} else {
				opts.Tripwire = true
			}
			m, err := gpt.New(cfg.Model, 1)
			if err != nil {
				t.Fatal(err)
			}
			var name string
			for _, p := range m.Params() {
				if strings.HasPrefix(p.Name, "blocks.1.attn.") {
					v := p.Tensor.Float32s()
					v[3] = float32(math.NaN())
					forge.NoGrad(func() { p.Tensor.CopyFrom(forge.FromSlice(v, p.Tensor.Shape()...)) })
					name = p.Name
					break
				}
			}
			g := forge.NewGenerator(5)
			T := cfg.Model.Context
			src := &alternating{batches: [][2][]int32{
				{g.RandInt(0, cfg.Model.Vocab, cfg.Batch, T).Int32s(), g.RandInt(0, cfg.Model.Vocab, cfg.Batch, T).Int32s()},
				{g.RandInt(0, cfg.Model.Vocab, cfg.Batch, T).Int32s(), g.RandInt(0, cfg.Model.Vocab, cfg.Batch, T).Int32s()},
			}}
			tr, err := NewTrainer(cfg, m, src, nil)
			if err != nil {
				t.Fatal(err)
			}
			before := weightBits(m)
			n, err := tr.RunWith(context.Background(), 3, opts)
			var te *TripwireError
			if !errors.As(err, &te) {
				t.Fatalf("RunWith = %d, %v; want a *TripwireError", n, err)
			}
			if n != 0 || te.Step != 1 || te.Trip.Scope != "blocks.1" || te.Trip.Phase != forge.PhaseForward || !slices.Contains(te.Trip.Params, name) {
				t.Errorf("n %d, %v", n, err)
			}
			if !strings.Contains(err.Error(), "tripwire at step 1: NaN from ") || !strings.Contains(err.Error(), "the step was not applied") {
				t.Errorf("message: %v", err)
			}
			t.Log(err)
			if !slices.Equal(weightBits(m), before) {
				t.Error("the weights changed")
			}
			if tr.StepCount() != 0 || len(tr.History.Steps) != 0 {
				t.Errorf("step count %d, history %d", tr.StepCount(), len(tr.History.Steps))
			}
			if forge.TripwireOn() {
				t.Error("the tripwire stayed on after the run")
			}
		})
	}
}

// weightBits is every parameter's values as bits (NaN equals itself).
func weightBits(m *gpt.Model) []uint32 {
	var out []uint32
	for _, p := range m.Params() {
		for _, v := range p.Tensor.Float32s() {
			out = append(out, math.Float32bits(v))
		}
	}
	return out
}
