package gpt

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/optim"
	"github.com/forgeml/forge/forge/profile"
)

// moeBenchVariants are the plain MLP and E experts top-k of the same
// hidden size, on a small-sized model.
var moeBenchVariants = []struct{ e, k int }{{0, 0}, {4, 1}, {4, 2}, {8, 1}, {8, 2}}

func moeVariantName(e, k int) string {
	if e == 0 {
		return "plain"
	}
	return fmt.Sprintf("E%d-k%d", e, k)
}

// moeBenchStep returns one training step (forward, backward, AdamW) of
// the variant on a fixed batch, and its tokens.
func moeBenchStep(tb testing.TB, e, k int) (func(), int) {
	c := DefaultConfig()
	c.Vocab, c.Context, c.Dim, c.Layers, c.Heads, c.FFNHidden = 512, 128, 128, 2, 4, 384
	c.Experts, c.TopK = e, k
	m, err := New(c, 1)
	if err != nil {
		tb.Fatal(err)
	}
	const B = 8
	g := forge.NewGenerator(2)
	data := g.RandInt(0, c.Vocab, B, c.Context+1)
	ids, tgt := data.Narrow(1, 0, c.Context).Contiguous(), data.Narrow(1, 1, c.Context).Contiguous()
	opt := optim.NewAdamWGroups(optim.DecayGroups(nn.Tensors(m), 0.1), optim.DefaultAdamWConfig())
	return func() {
		forge.Collect(func() {
			opt.ZeroGrad()
			l := m.Loss(ids, tgt)
			l.Backward()
			opt.Step()
			l.Item()
		})
	}, B * c.Context
}

// BenchmarkMoEStep times a training step of each variant, reporting
// tokens/s.
//
//	go test ./forge/gpt -run X -bench MoEStep -benchtime 10x
func BenchmarkMoEStep(b *testing.B) {
	for _, v := range moeBenchVariants {
		b.Run(moeVariantName(v.e, v.k), func(b *testing.B) {
			step, tokens := moeBenchStep(b, v.e, v.k)
			step() // warm-up
			b.ResetTimer()
			for range b.N {
				step()
			}
			b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// TestMoEThroughput is BenchmarkMoEStep for a busy machine: the variants
// take turns, one step each per round, so that all see the same load, and
// each reports its median and best tokens/s. It runs only with
// FORGE_MOE_THROUGHPUT set to the number of rounds.
//
//	FORGE_MOE_THROUGHPUT=15 go test ./forge/gpt -run TestMoEThroughput -v
func TestMoEThroughput(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("FORGE_MOE_THROUGHPUT"))
	if rounds <= 0 {
		t.Skip("set FORGE_MOE_THROUGHPUT to a number of rounds")
	}
	steps := make([]func(), len(moeBenchVariants))
	tps := make([][]float64, len(moeBenchVariants))
	tokens := 0
	for i, v := range moeBenchVariants {
		steps[i], tokens = moeBenchStep(t, v.e, v.k)
		steps[i]() // warm-up
	}
	for range rounds {
		for i, step := range steps {
			start := time.Now()
			step()
			tps[i] = append(tps[i], float64(tokens)/time.Since(start).Seconds())
		}
	}
	for i, v := range moeBenchVariants {
		slices.Sort(tps[i])
		t.Logf("%-6s median %6.0f tokens/s, best %6.0f (%d rounds)", moeVariantName(v.e, v.k), tps[i][len(tps[i])/2], tps[i][len(tps[i])-1], rounds)
	}
}

// The FLOPs the kernels of a training step record (forward and backward)
// grow with k by one MLP per token and block, and with E by the router
// alone — the sparse dispatch's cost, measured, not assumed; a dense
// dispatch would add E−k MLPs. The step's other kernels (attention, head,
// norms) are the same in every variant and cancel.
func TestMoEStepFLOPsScaleWithK(t *testing.T) {
	flops := func(e, k int) (float64, Config) {
		c := testConfig()
		c.Experts, c.TopK = e, k
		m, err := New(c, 1)
		if err != nil {
			t.Fatal(err)
		}
		g := forge.NewGenerator(2)
		ids, tgt := randIDs(g, c.Vocab, 2, 16), randIDs(g, c.Vocab, 2, 16)
		p := profile.Run(func() {
			l := m.Loss(ids, tgt)
			l.Backward()
			l.Item()
		})
		total := 0.0
		for _, r := range p.Report(profile.ReportOptions{}).Rows {
			if strings.HasPrefix(r.Kernel, "matmul") {
				total += r.FLOPs
			}
		}
		return total, c.Resolved()
	}
	f41, c := flops(4, 1)
	f42, _ := flops(4, 2)
	f82, _ := flops(8, 2)
	N, L, C, F := 2.0*16, float64(c.Layers), float64(c.Dim), float64(c.FFNHidden)
	mlp := 2 * 3 * C * F // SwiGLU forward FLOPs per token
	if got, want := f42-f41, 3*N*L*mlp; got != want {
		t.Errorf("k 1 → 2: matmul FLOPs grow by %g, want one more MLP per token and block (×3 with backward) %g", got, want)
	}
	if got, want := f82-f42, 3*N*L*2*4*C; got != want {
		t.Errorf("E 4 → 8: matmul FLOPs grow by %g, want the router's 4 more rows only %g", got, want)
	}
	t.Logf("matmul FLOPs per step: E4 k1 %.3g, E4 k2 %.3g, E8 k2 %.3g", f41, f42, f82)
}
