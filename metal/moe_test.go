package metal

import (
	"math"
	"slices"
	"testing"
)

// TestTrainMoEMatchesCPU trains a mixture-of-experts GPT (4 experts,
// top-2) for four steps on metal-emu and on the CPU: the same routing
// every step, losses within 1e-4 relative, and one host read of the
// router per MoE layer and micro-batch beside the step's final wait.
func TestTrainMoEMatchesCPU(t *testing.T) {
	dev, mb, cpuDev := trainDevices(t)
	cfg := trainConfig(1)
	cfg.Model.Experts, cfg.Model.TopK = 4, 2
	const steps = 4
	want, _, _, err := trainRun(cpuDev, cfg, steps)
	if err != nil {
		t.Fatalf("cpu: %v", err)
	}
	got, _, st, err := trainRun(dev, cfg, steps)
	if err != nil {
		t.Fatalf("training on %s: %v", mb.Name(), err)
	}
	for i := range want {
		g, w := got[i], want[i]
		rel := math.Abs(g.Loss-w.Loss) / math.Abs(w.Loss)
		t.Logf("step %d: loss metal-emu %.7f cpu %.7f (rel %.1e); tokens per expert %v; %d command buffers, %d syncs",
			i+1, g.Loss, w.Loss, rel, g.Router.Tokens, st[i].cbs, st[i].syncs)
		if !(rel <= 1e-4) {
			t.Errorf("step %d: loss %.7f on metal-emu, %.7f on the CPU (relative difference %.1e > 1e-4)", i+1, g.Loss, w.Loss, rel)
		}
		if g.Router == nil || w.Router == nil || !slices.EqualFunc(g.Router.Tokens, w.Router.Tokens, slices.Equal) {
			t.Errorf("step %d: routing on metal-emu %+v, on the CPU %+v", i+1, g.Router, w.Router)
		}
		if want := int64(cfg.Model.Layers + 1); st[i].syncs != want {
			t.Errorf("step %d: %d syncs, want one per MoE layer and the loss read = %d", i+1, st[i].syncs, want)
		}
	}
}
