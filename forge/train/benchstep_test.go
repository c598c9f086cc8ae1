package train

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/profile"
)

// TestTinyStepProfile profiles real training steps of the tiny config.
// Timing ratios are logged, not asserted: the machine is shared.
func TestTinyStepProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the tiny model")
	}
	tr, err := newBenchTrainer("tiny", 0)
	if err != nil {
		t.Fatal(err)
	}
	tr.Step() // warm-up
	const n = 2
	p := profile.RunN(n, func() { tr.Step() })
	r := p.Report(profile.ReportOptions{Top: 10})
	t.Logf("tiny step, %d steps profiled:\n%s", n, r)
	t.Logf("per step: wall %s = kernels %s + outside %s; kernels are %.1f %% of the wall",
		r.Wall, r.Kernel, r.Outside, 100*r.KernelShare)

	if p.Iterations != n || len(p.Records) == 0 || p.KernelTime() <= 0 || p.KernelTime() > p.Wall {
		t.Fatalf("%d records, kernels %v, wall %v", len(p.Records), p.KernelTime(), p.Wall)
	}
	// The phases partition the wall time: data, forward, backward, optimizer.
	var wall, kernel time.Duration
	var names []string
	for _, ph := range r.Phases {
		wall += ph.Wall
		kernel += ph.Kernel
		names = append(names, ph.Phase)
	}
	slices.Sort(names)
	if got := strings.Join(names, " "); got != "backward data forward optimizer" {
		t.Errorf("phases %q", got)
	}
	if d := r.Wall - wall; d < 0 || d > n*time.Nanosecond*time.Duration(len(r.Phases)) { // rounding of the per-step division
		t.Errorf("phases add up to %v, wall is %v", wall, r.Wall)
	}
	if d := r.Kernel - kernel; d < 0 || d > time.Duration(n*len(r.Phases)) {
		t.Errorf("phase kernels add up to %v, kernels are %v", kernel, r.Kernel)
	}

	// Scopes: every block's forward kernels are attributed to it; backward
	// and optimizer kernels to none. The block's matmul FLOPs are the
	// model's: 2·N·C·(qkv + out + SwiGLU gate, up, down).
	c := tr.Model.Config
	N := int64(tr.Config.Batch * c.Context)
	C, F, D := int64(c.Dim), int64(c.FFNHidden), int64(c.HeadDim())
	qkv := int64(c.Heads+2*c.KVHeads) * D
	want := 2 * N * C * (qkv + int64(c.Heads)*D + 3*F)
	flops := map[string]int64{}
	for _, rec := range p.Records {
		switch {
		case rec.Phase != forge.PhaseForward && rec.Scope != "":
			t.Fatalf("%s %s kernel %s has scope %q", rec.Phase, rec.Kernel, rec.Kernel, rec.Scope)
		case rec.Kernel == "matmul" && rec.Scope != "":
			flops[rec.Scope] += rec.FLOPs
		}
	}
	for i := range c.Layers {
		s := fmt.Sprintf("blocks.%d", i)
		if flops[s] != n*want {
			t.Errorf("%s: matmul FLOPs %d per step, want %d", s, flops[s]/n, want)
		}
	}
	if len(flops) != c.Layers {
		t.Errorf("scopes with matmuls: %v", flops)
	}
	sc := p.Report(profile.ReportOptions{Group: profile.GroupScope})
	t.Logf("by scope:\n%s", sc)
	if len(p.Scopes) != n*c.Layers {
		t.Errorf("%d scope spans, want %d", len(p.Scopes), n*c.Layers)
	}
}

// BenchmarkStepPlain and BenchmarkStepProfiled measure the profiler's
// overhead on a tiny training step:
//
//	go test -run '^$' -bench 'Step(Plain|Profiled)' -count 6 ./forge/train
func BenchmarkStepPlain(b *testing.B) { benchStep(b, false) }

// BenchmarkStepProfiled records every step with Run.
func BenchmarkStepProfiled(b *testing.B) { benchStep(b, true) }

func benchStep(b *testing.B, profiled bool) {
	tr, err := newBenchTrainer("tiny", 0)
	if err != nil {
		b.Fatal(err)
	}
	tr.Step()
	tr.Step()
	calls := 0
	for b.Loop() {
		if profiled {
			calls += len(profile.Run(func() { tr.Step() }).Records)
		} else {
			tr.Step()
		}
	}
	if profiled {
		b.ReportMetric(float64(calls)/float64(b.N), "kernels/op")
	}
}
