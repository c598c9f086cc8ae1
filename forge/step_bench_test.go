package forge_test

import (
	"math"
	"testing"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/optim"
)

// gptConfig is one of the configs of ../shared/bench/torch_gpt_step.py.
type gptConfig struct {
	B, T, C, H, V, L, Hidden int
}

var (
	tinyConfig  = gptConfig{B: 16, T: 128, C: 128, H: 4, V: 512, L: 4, Hidden: 512}
	smallConfig = gptConfig{B: 8, T: 256, C: 256, H: 8, V: 4096, L: 6, Hidden: 1024}
)

// benchGPT is the model of ../shared/bench/torch_gpt_step.py written with
// the public ops: pre-norm decoder, RMSNorm (eps 1e-5), RoPE, causal
// attention, SwiGLU MLP, tied head, no biases. It exists to measure the
// tensor core end to end.
type benchGPT struct {
	gptConfig
	wte                 *forge.Tensor // (V, C)
	ln1, ln2, wqkv, wo  []*forge.Tensor
	wgate, wup, wdown   []*forge.Tensor
	lnf                 *forge.Tensor
	ids, targets        *forge.Tensor
	params              []*forge.Tensor
	decayed, notDecayed int
}

func newBenchGPT(cfg gptConfig) *benchGPT {
	m := &benchGPT{gptConfig: cfg}
	g := forge.NewGenerator(1)
	p := func(std float64, shape ...int) *forge.Tensor {
		var t *forge.Tensor
		forge.NoGrad(func() { t = g.Randn(forge.Float32, shape...).MulScalar(std) })
		t.RequiresGrad()
		m.params = append(m.params, t)
		return t
	}
	ones := func() *forge.Tensor {
		t := forge.Ones(m.C).RequiresGrad()
		m.params = append(m.params, t)
		return t
	}
	res := 0.02 / math.Sqrt(2*float64(m.L))
	m.wte = p(0.02, m.V, m.C)
	for range m.L {
		m.ln1 = append(m.ln1, ones())
		m.wqkv = append(m.wqkv, p(0.02, m.C, 3*m.C))
		m.wo = append(m.wo, p(res, m.C, m.C))
		m.ln2 = append(m.ln2, ones())
		m.wgate = append(m.wgate, p(0.02, m.C, m.Hidden))
		m.wup = append(m.wup, p(0.02, m.C, m.Hidden))
		m.wdown = append(m.wdown, p(res, m.Hidden, m.C))
	}
	m.lnf = ones()
	dg := forge.NewGenerator(2)
	m.ids = dg.RandInt(0, m.V, m.B, m.T)
	m.targets = dg.RandInt(0, m.V, m.B, m.T)
	return m
}

func (m *benchGPT) loss() *forge.Tensor {
	B, T, C, H := m.B, m.T, m.C, m.H
	D := C / H
	x := forge.Embedding(m.ids, m.wte) // (B, T, C)
	for l := range m.L {
		h := forge.RMSNorm(x, m.ln1[l], 1e-5)
		qkv := h.MatMul(m.wqkv[l]).Reshape(B, T, 3, H, D).Permute(2, 0, 3, 1, 4) // (3, B, H, T, D)
		q, k, v := forge.RoPE(qkv.Index(0, 0), 0), forge.RoPE(qkv.Index(0, 1), 0), qkv.Index(0, 2)
		a := forge.Attention(q, k, v, true).Transpose(1, 2).Reshape(B, T, C)
		x = x.Add(a.MatMul(m.wo[l]))
		h = forge.RMSNorm(x, m.ln2[l], 1e-5)
		f := forge.SwiGLU(h.MatMul(m.wgate[l]), h.MatMul(m.wup[l]))
		x = x.Add(f.MatMul(m.wdown[l]))
	}
	x = forge.RMSNorm(x, m.lnf, 1e-5)
	logits := x.MatMul(m.wte.T()) // (B, T, V)
	return forge.CrossEntropy(logits, m.targets, -1)
}

// trainer is the timed step of torch_gpt_step.py: zero grad, forward,
// loss, backward, global-norm clip 1.0, AdamW (lr 3e-4, betas 0.9/0.95,
// eps 1e-8, weight decay 0.1 on rank ≥ 2 parameters).
type trainer struct {
	m   *benchGPT
	opt *optim.AdamW
}

func newTrainer(cfg gptConfig) *trainer {
	m := newBenchGPT(cfg)
	return &trainer{m: m, opt: optim.NewAdamW(m.params, optim.DefaultAdamWConfig())}
}

func (tr *trainer) step() float64 {
	tr.opt.ZeroGrad()
	loss := tr.m.loss()
	loss.Backward()
	optim.ClipGradNorm(tr.m.params, 1.0)
	tr.opt.Step()
	return loss.Item()
}

// BenchmarkTinyStep times forward + backward of the tiny GPT (no optimizer)
// and reports tokens/s.
func BenchmarkTinyStep(b *testing.B) {
	m := newBenchGPT(tinyConfig)
	for i := 0; i < b.N; i++ {
		m.loss().Backward()
	}
	b.ReportMetric(float64(m.B*m.T*b.N)/b.Elapsed().Seconds(), "tok/s")
}

func benchmarkStep(b *testing.B, cfg gptConfig) {
	tr := newTrainer(cfg)
	tr.step() // warm-up: allocates the optimizer state
	b.ResetTimer()
	times := make([]time.Duration, 0, b.N)
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		tr.step()
		times = append(times, time.Since(t0))
	}
	cpu := cpuTime() - cpu0
	b.StopTimer()
	med := medianDuration(times)
	b.ReportMetric(float64(cfg.B*cfg.T)/med.Seconds(), "tok/s")
	b.ReportMetric(float64(med.Microseconds())/1e3, "ms/step")
	if cpu > 0 {
		// Process CPU time (all threads) per step: less sensitive than the
		// wall time to other processes on a shared machine.
		b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/step")
	}
}

func medianDuration(ts []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ts...)
	for i := 1; i < len(s); i++ { // insertion sort: a handful of values
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}

// BenchmarkStepTiny times a full training step of the tiny config (zero
// grad, forward, backward, clip, AdamW) and reports the median step time
// and tokens/s, like torch_gpt_step.py --config tiny.
func BenchmarkStepTiny(b *testing.B) { benchmarkStep(b, tinyConfig) }

// BenchmarkStepSmall is BenchmarkStepTiny for the small config.
func BenchmarkStepSmall(b *testing.B) { benchmarkStep(b, smallConfig) }

// TestTrainingStepLearns checks that the benchmarked step trains: the loss
// of the tiny model on one fixed batch falls (memorisation).
func TestTrainingStepLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a small model")
	}
	tr := newTrainer(tinyConfig)
	first := tr.step()
	if d := math.Abs(first - math.Log(float64(tinyConfig.V))); d > 0.1 {
		t.Errorf("initial loss %v, want ≈ ln V = %v", first, math.Log(float64(tinyConfig.V)))
	}
	var last float64
	for range 5 {
		last = tr.step()
	}
	if !(last < first-0.05) {
		t.Errorf("loss did not fall: %v → %v", first, last)
	}
}
