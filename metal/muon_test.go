package metal

import (
	"math"
	"testing"
)

// TestMuonTrainMatchesCPU trains the tiny GPT of TestTrainMatchesCPU with
// Muon (optim.Muon: Newton–Schulz on the blocks' matrices, AdamW for the
// rest, the clip read on the device) on metal-emu and on the CPU. The
// losses agree as TestTrainMatchesCPU's do (1e-4 relative), and each step
// stays one command buffer and one sync: the iteration's matmuls and the
// clip's coefficient and skip flag never go through the host.
func TestMuonTrainMatchesCPU(t *testing.T) {
	dev, mb, cpuDev := trainDevices(t)
	const steps = 4
	cfg := trainConfig(1)
	cfg.Optimizer, cfg.MuonLR = "muon", 0.05
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
		t.Logf("step %d: loss metal-emu %.7f cpu %.7f (rel %.1e); %d dispatches in %d command buffers, %d syncs",
			i+1, g.Loss, w.Loss, rel, st[i].dispatches, st[i].cbs, st[i].syncs)
		if !(rel <= 1e-4) {
			t.Errorf("step %d: loss %.7f on metal-emu, %.7f on the CPU (relative difference %.1e > 1e-4)", i+1, g.Loss, w.Loss, rel)
		}
		if g.Skipped || g.Step != i+1 {
			t.Errorf("step %d: skipped %v, step %d", i+1, g.Skipped, g.Step)
		}
		if st[i].cbs != 1 || st[i].syncs != 1 {
			t.Errorf("step %d: %d command buffers in %d syncs; want one of each", i+1, st[i].cbs, st[i].syncs)
		}
	}
	if want[steps-1].Loss >= want[0].Loss {
		t.Errorf("the loss did not fall with Muon: %v → %v", want[0].Loss, want[steps-1].Loss)
	}
}
