package train

import (
	"math"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
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
