package gpt

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/optim"
)

// testConfig is a small model of every shape the tests need.
func testConfig() Config {
	c := DefaultConfig()
	c.Vocab, c.Context, c.Dim, c.Layers, c.Heads = 70, 16, 32, 2, 4
	return c
}

func variants() map[string]Config {
	base := testConfig()
	gqa := base
	gqa.KVHeads = 2
	gpt2 := base
	gpt2.Norm, gpt2.MLP, gpt2.Position, gpt2.Bias = "layernorm", "gelu", "learned", true
	untied := base
	untied.Untied, untied.Bias = true, true
	moe := base
	moe.Experts = 4 // top-2 by default
	moeGELU := gpt2
	moeGELU.Experts, moeGELU.TopK = 3, 1
	return map[string]Config{"base": base, "gqa": gqa, "gpt2": gpt2, "untied": untied, "moe": moe, "moe-gelu": moeGELU}
}

func randIDs(g *forge.Generator, v, b, t int) *forge.Tensor { return g.RandInt(0, v, b, t) }

func TestParamsMatchConfigCount(t *testing.T) {
	for name, c := range variants() {
		m, err := New(c, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := nn.Count(m), c.Params(); got != want {
			t.Errorf("%s: model has %d parameters, Config.Params says %d", name, got, want)
		}
		seen := map[string]bool{}
		for _, p := range m.Params() {
			if seen[p.Name] {
				t.Errorf("%s: duplicate parameter name %s", name, p.Name)
			}
			seen[p.Name] = true
			if p.Tensor.Name() != p.Name {
				t.Errorf("%s: tensor name %q for parameter %q", name, p.Tensor.Name(), p.Name)
			}
		}
	}
}

func TestPaddedVocabAndNames(t *testing.T) {
	m, err := New(testConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Wte.Weight.Shape(); got[0] != 128 {
		t.Errorf("vocab 70 padded to %d rows, want 128", got[0])
	}
	names := []string{"wte.weight", "blocks.0.norm1.weight", "blocks.0.attn.wqkv.weight", "blocks.1.attn.wo.weight",
		"blocks.1.mlp.w_gate.weight", "blocks.1.mlp.w_up.weight", "blocks.1.mlp.w_down.weight", "norm_f.weight"}
	for _, n := range names {
		if _, ok := nn.Find(m, n); !ok {
			t.Errorf("no parameter %s", n)
		}
	}
	if got := len(nn.Match(m, "blocks.*.attn.*")); got != 4 {
		t.Errorf("blocks.*.attn.* matched %d parameters, want 4", got)
	}
	s := nn.Summarize(m).String()
	if !strings.Contains(s, "blocks.1.mlp.w_down.weight") || !strings.Contains(s, "total") {
		t.Errorf("summary lacks rows:\n%s", s)
	}
}

func TestInitStatistics(t *testing.T) {
	c := DefaultConfig()
	c.Layers = 8
	m, err := New(c, 7)
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, want float64) {
		p, _ := nn.Find(m, name)
		st := p.Stats()
		if math.Abs(st.Mean) > want/10 || math.Abs(st.Std-want)/want > 0.02 {
			t.Errorf("%s: mean %g std %g, want N(0, %g)", name, st.Mean, st.Std, want)
		}
	}
	check("wte.weight", 0.02)
	check("blocks.3.attn.wqkv.weight", 0.02)
	check("blocks.3.attn.wo.weight", 0.02/4)
	check("blocks.3.mlp.w_down.weight", 0.02/4)
	if st := m.NormF.Weight.Stats(); st.Min != 1 || st.Max != 1 {
		t.Errorf("norm weights not 1: %+v", st)
	}
	m2, _ := New(c, 7)
	a, b := m.Blocks[2].MLP.Up.Weight.Float32s(), m2.Blocks[2].MLP.Up.Weight.Float32s()
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("the same seed gave different weights")
		}
	}
}

func TestConfigErrors(t *testing.T) {
	cases := map[string]string{
		`{"vocab": 1}`:                           "vocab 1",
		`{"d_model": 30, "n_head": 4}`:           "not a multiple of n_head",
		`{"n_kv_head": 3}`:                       "must divide n_head",
		`{"norm": "batchnorm"}`:                  `norm "batchnorm"`,
		`{"mlp": "relu"}`:                        `mlp "relu"`,
		`{"position": "alibi"}`:                  `position "alibi"`,
		`{"dropout": 1}`:                         "dropout 1",
		`{"d_modle": 3}`:                         `unknown field "d_modle"`,
		`{"vocab": "x"}`:                         "cannot unmarshal",
		`{} {}`:                                  "trailing data",
		`{"n_experts": -1}`:                      "n_experts -1",
		`{"n_experts": 4, "moe_top_k": 5}`:       "moe_top_k 5: want 1..n_experts (4)",
		`{"n_experts": 4, "moe_top_k": -1}`:      "moe_top_k -1",
		`{"moe_top_k": 2}`:                       "need n_experts > 1",
		`{"n_experts": 1, "moe_aux_coef": 1}`:    "need n_experts > 1",
		`{"n_experts": 4, "moe_aux_coef": -0.1}`: "moe_aux_coef -0.1",
	}
	for in, want := range cases {
		_, err := ParseConfig([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig(%s) = %v, want an error containing %q", in, err, want)
		}
	}
	if _, err := ParseConfig([]byte(`{"vocab": 300, "n_layer": 2}`)); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}

func TestForwardShapesAndGradients(t *testing.T) {
	for name, c := range variants() {
		m, _ := New(c, 3)
		g := forge.NewGenerator(4)
		ids := randIDs(g, c.Vocab, 2, 16)
		logits := m.Forward(ids, nil)
		if got := logits.Shape(); got[0] != 2 || got[1] != 16 || got[2] != c.PaddedVocab() {
			t.Errorf("%s: logits %v", name, got)
		}
		loss := m.Loss(ids, randIDs(g, c.Vocab, 2, 16))
		if l := loss.Item(); math.Abs(l-math.Log(float64(c.PaddedVocab()))) > 0.1 {
			t.Errorf("%s: initial loss %g, want ≈ ln(%d) = %g", name, l, c.PaddedVocab(), math.Log(float64(c.PaddedVocab())))
		}
		loss.Backward()
		for _, p := range m.Params() {
			if p.Tensor.Grad() == nil {
				t.Errorf("%s: %s has no gradient", name, p.Name)
				continue
			}
			if st := p.Tensor.Grad().Stats(); st.NaN+st.PosInf+st.NegInf > 0 || (st.Max == 0 && st.Min == 0 && !strings.HasSuffix(p.Name, "bias")) {
				t.Errorf("%s: %s gradient %+v", name, p.Name, st)
			}
		}
	}
}

// A causal model's logits at position t must not depend on later tokens.
func TestCausal(t *testing.T) {
	for name, c := range variants() {
		m, _ := New(c, 5)
		g := forge.NewGenerator(6)
		ids := randIDs(g, c.Vocab, 1, 12).Int32s()
		other := append([]int32(nil), ids...)
		other[8], other[11] = (other[8]+1)%int32(c.Vocab), (other[11]+5)%int32(c.Vocab)
		var a, b []float32
		forge.NoGrad(func() {
			a = m.Forward(forge.FromSlice(ids, 1, 12), nil).Narrow(1, 0, 8).Float32s()
			b = m.Forward(forge.FromSlice(other, 1, 12), nil).Narrow(1, 0, 8).Float32s()
		})
		// A mixture of experts batches each expert's tokens: a later token
		// routed elsewhere changes the matmuls' row counts, and with them
		// the last bit of BLAS results; allow a few float32 ulps there.
		tol := 0.0
		if c.MoE() {
			tol = 1e-6
		}
		for i := range a {
			if math.Abs(float64(a[i]-b[i])) > tol*max(1, math.Abs(float64(a[i]))) {
				t.Fatalf("%s: logit %d before the changed position moved: %g vs %g", name, i, a[i], b[i])
			}
		}
	}
}

// KV-cached generation must produce exactly the tokens of uncached
// generation, also past the context where the window restarts.
func TestGenerateCachedMatchesUncached(t *testing.T) {
	for name, c := range variants() {
		m, _ := New(c, 8)
		prompt := []int{1, 5, 9}
		opts := GenerateOptions{MaxTokens: 40} // context 16: two window restarts
		cached, err := m.Generate(prompt, opts)
		if err != nil {
			t.Fatal(err)
		}
		opts.NoCache = true
		plain, err := m.Generate(prompt, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(cached) != 40 || !slices.Equal(cached, plain) {
			t.Errorf("%s: cached %v\nuncached %v", name, cached, plain)
		}
		// Sampled, same seed: the same draws.
		s := GenerateOptions{MaxTokens: 20, Sampling: Sampling{Temperature: 0.9, TopK: 20, TopP: 0.9}, Seed: 3}
		a, _ := m.Generate(prompt, s)
		s.NoCache = true
		b, _ := m.Generate(prompt, s)
		if !slices.Equal(a, b) {
			t.Errorf("%s: sampled cached %v, uncached %v", name, a, b)
		}
	}
}

func TestGenerateStopsAndStreams(t *testing.T) {
	m, _ := New(testConfig(), 9)
	var streamed []int
	out, err := m.Generate([]int{2}, GenerateOptions{MaxTokens: 30, OnToken: func(id int) bool {
		streamed = append(streamed, id)
		return len(streamed) < 5
	}})
	if err != nil || len(out) != 5 || !slices.Equal(out, streamed) {
		t.Errorf("streaming stop: out %v streamed %v err %v", out, streamed, err)
	}
	first, _ := m.Generate([]int{2}, GenerateOptions{MaxTokens: 1})
	out, _ = m.Generate([]int{2}, GenerateOptions{MaxTokens: 30, StopTokens: first})
	if len(out) != 1 || out[0] != first[0] {
		t.Errorf("stop token %v: got %v", first, out)
	}
	out, _ = m.Generate([]int{2}, GenerateOptions{MaxTokens: 30, Stop: func(o []int) bool { return len(o) == 3 }})
	if len(out) != 3 {
		t.Errorf("stop condition: got %d tokens", len(out))
	}
	if _, err := m.Generate(nil, GenerateOptions{MaxTokens: 3}); err != ErrEmptyPrompt {
		t.Errorf("empty prompt: %v", err)
	}
	if _, err := m.Generate([]int{70}, GenerateOptions{MaxTokens: 3}); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Errorf("out-of-vocabulary prompt: %v", err)
	}
	if _, err := m.Generate([]int{1}, GenerateOptions{MaxTokens: 3, Sampling: Sampling{Temperature: -1}}); err == nil {
		t.Error("negative temperature accepted")
	}
	for _, id := range out {
		if id >= 70 {
			t.Errorf("sampled padding id %d", id)
		}
	}
}

func TestSampling(t *testing.T) {
	logits := []float32{1, 3, 2, float32(math.NaN()), 0.5}
	g := forge.NewGenerator(1)
	if got := (Sampling{}).Sample(logits, g); got != 1 {
		t.Errorf("greedy picked %d", got)
	}
	count := func(s Sampling, n int) []int {
		c := make([]int, len(logits))
		for range n {
			c[s.Sample(logits, g)]++
		}
		return c
	}
	c := count(Sampling{Temperature: 1, TopK: 2}, 4000)
	if c[0]+c[3]+c[4] != 0 || c[1] == 0 || c[2] == 0 {
		t.Errorf("top-k 2 drew %v", c)
	}
	// p(1) = e³/(e+e³+e²+e^0.5) = 0.631: top-p 0.6 keeps only token 1,
	// top-p 0.7 keeps tokens 1 and 2 (0.631 + 0.232).
	c = count(Sampling{Temperature: 1, TopP: 0.6}, 1000)
	if c[1] != 1000 {
		t.Errorf("top-p 0.6 drew %v", c)
	}
	c = count(Sampling{Temperature: 1, TopP: 0.7}, 4000)
	if c[0]+c[3]+c[4] != 0 || math.Abs(float64(c[1])/4000-0.731) > 0.03 {
		t.Errorf("top-p 0.7 drew %v, want tokens 1 and 2 at 0.731 : 0.269", c)
	}
	c = count(Sampling{Temperature: 1}, 20000)
	z := math.Exp(1) + math.Exp(3) + math.Exp(2) + math.Exp(0.5)
	for i, want := range []float64{math.Exp(1) / z, math.Exp(3) / z, math.Exp(2) / z, 0, math.Exp(0.5) / z} {
		if got := float64(c[i]) / 20000; math.Abs(got-want) > 0.015 {
			t.Errorf("token %d drawn with frequency %.3f, want %.3f", i, got, want)
		}
	}
}

// Training on one fixed batch must drive the loss towards zero.
// overfit trains m with AdamW (lr 3e-3, clip 1) on one batch of seq+1
// random tokens per row until score(loss) < 0.05 or maxSteps, and returns
// the last score and the steps taken. score turns the training loss into
// what is judged (the loss itself, or its cross-entropy part).
func overfit(m *Model, vocab, seq, maxSteps int, score func(loss float64) float64) (float64, int) {
	data := randIDs(forge.NewGenerator(2), vocab, 4, seq+1)
	ids, tgt := data.Narrow(1, 0, seq).Contiguous(), data.Narrow(1, 1, seq).Contiguous()
	cfg := optim.DefaultAdamWConfig()
	cfg.LR = 3e-3
	opt := optim.NewAdamWGroups(optim.DecayGroups(nn.Tensors(m), 0.1), cfg)
	s := 0.0
	step := 0
	for step = 1; step <= maxSteps; step++ {
		opt.ZeroGrad()
		l := m.Loss(ids, tgt)
		l.Backward()
		optim.ClipGradNorm(nn.Tensors(m), 1)
		opt.Step()
		if s = score(l.Item()); s < 0.05 {
			break
		}
	}
	return s, min(step, maxSteps)
}

func identity(x float64) float64 { return x }

func TestOverfitOneBatch(t *testing.T) {
	c := DefaultConfig()
	c.Vocab, c.Context, c.Dim, c.Layers, c.Heads, c.FFNHidden = 512, 128, 128, 4, 4, 512 // tiny
	m, _ := New(c, 1)
	loss, step := overfit(m, c.Vocab, 64, 150, identity)
	t.Logf("loss %.4f after %d steps", loss, step)
	if loss >= 0.05 {
		t.Errorf("loss %.4f after 150 steps, want < 0.05", loss)
	}
}

func TestMoEConfigCounts(t *testing.T) {
	base := testConfig()
	c := base
	c.Experts = 8
	r := c.Resolved()
	if r.TopK != 2 || r.MoEAuxCoef != 0.01 {
		t.Fatalf("defaults: top-k %d, aux coef %g; want 2 and 0.01", r.TopK, r.MoEAuxCoef)
	}
	F, C, L := r.FFNHidden, r.Dim, r.Layers
	mlp := 3 * C * F // SwiGLU, no biases
	if got, want := c.Params()-base.Params(), L*(7*mlp+8*C); got != want {
		t.Errorf("8 experts add %d parameters, want 7 MLPs and a router per block = %d", got, want)
	}
	if got, want := c.ActiveParams(), base.Params()+L*(mlp+8*C); got != want {
		t.Errorf("active parameters %d, want the plain model's + one MLP + the router per block = %d", got, want)
	}
	// FLOPs grow with k (one more MLP per block) and with E only by the router.
	k1 := c
	k1.TopK = 1
	if got, want := c.FLOPsPerToken()-k1.FLOPsPerToken(), int64(6*L*mlp); got != want {
		t.Errorf("k 1 → 2 adds %d FLOPs per token, want 6·L·mlp = %d", got, want)
	}
	e4 := c
	e4.Experts = 4
	if got, want := c.FLOPsPerToken()-e4.FLOPsPerToken(), int64(6*L*4*C); got != want {
		t.Errorf("E 4 → 8 adds %d FLOPs per token, want only the router's 6·L·4·C = %d", got, want)
	}
	if k1.FLOPsPerToken()-base.FLOPsPerToken() != int64(6*L*8*C) {
		t.Errorf("top-1 of 8 costs %d FLOPs per token more than the plain MLP, want the router's %d",
			k1.FLOPsPerToken()-base.FLOPsPerToken(), 6*L*8*C)
	}
}

// The names the model documents, and the loss: cross-entropy plus
// coef·Σ aux while recording gradients, cross-entropy alone under NoGrad.
func TestMoELossAndNames(t *testing.T) {
	c := testConfig()
	c.Experts, c.MoEAuxCoef = 4, 0.5
	m, err := New(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"blocks.0.mlp.router.weight", "blocks.1.mlp.experts.3.w_up.weight",
		"blocks.1.mlp.experts.0.w_gate.weight", "blocks.0.mlp.experts.2.w_down.weight"} {
		if _, ok := nn.Find(m, n); !ok {
			t.Errorf("no parameter %s", n)
		}
	}
	g := forge.NewGenerator(5)
	ids, tgt := randIDs(g, c.Vocab, 2, 16), randIDs(g, c.Vocab, 2, 16)
	ce := forge.CrossEntropy(m.Forward(ids, nil), tgt, -1).Item()
	total := m.Loss(ids, tgt).Item()
	aux := 0.0
	for _, s := range m.RouterStats() {
		aux += s.Aux
		if n := s.Tokens[0] + s.Tokens[1] + s.Tokens[2] + s.Tokens[3]; n != 2*16*2 {
			t.Errorf("router counts %v sum to %d, want B·T·k = 64", s.Tokens, n)
		}
	}
	if want := ce + 0.5*aux; math.Abs(total-want) > 1e-5 {
		t.Errorf("training loss %.7f, want ce %.7f + 0.5·aux %.7f = %.7f", total, ce, aux, want)
	}
	var l float64
	forge.NoGrad(func() { l = m.Loss(ids, tgt).Item() })
	if l != ce {
		t.Errorf("evaluation loss %.7f, want the cross-entropy %.7f", l, ce)
	}
}

// A tiny MoE model fits one batch, as the plain one does.
func TestMoEOverfitOneBatch(t *testing.T) {
	c := DefaultConfig()
	c.Vocab, c.Context, c.Dim, c.Layers, c.Heads, c.FFNHidden = 256, 32, 64, 2, 4, 128
	c.Experts, c.TopK = 4, 2
	m, _ := New(c, 1)
	// Judge the cross-entropy: the training loss also holds coef·aux.
	ce, step := overfit(m, c.Vocab, 32, 200, func(loss float64) float64 {
		aux := 0.0
		for _, s := range m.RouterStats() {
			aux += s.Aux
		}
		return loss - c.Resolved().MoEAuxCoef*aux
	})
	t.Logf("cross-entropy %.4f after %d steps; routing %+v", ce, step, m.RouterStats())
	if ce >= 0.05 {
		t.Errorf("cross-entropy %.4f after 200 steps, want < 0.05", ce)
	}
}

// TestQuantMoE: a mixture of experts quantises (and can prune) its
// experts' layers, named as their parameters, and trains.
func TestQuantMoE(t *testing.T) {
	c := DefaultConfig()
	c.Vocab, c.Context, c.Dim, c.Layers, c.Heads, c.FFNHidden = 64, 8, 16, 2, 2, 32
	c.Experts, c.TopK, c.Quant = 4, 2, forge.QuantTernary
	m, err := New(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range m.Params() {
		names[p.Name] = true
	}
	n := 0
	for _, l := range m.Linears() {
		if !names[l.Name+".weight"] {
			t.Errorf("linear %s is not named as a parameter", l.Name)
		}
		if strings.Contains(l.Name, "experts") {
			n++
			if l.Layer.Quant != forge.QuantTernary {
				t.Errorf("%s is not quantised", l.Name)
			}
		}
	}
	if n != 2*4*3 {
		t.Fatalf("%d expert layers listed, want 24", n)
	}
	ids := forge.FromSlice([]int32{1, 2, 3, 4, 5, 6, 7, 8}, 1, 8)
	loss := m.Loss(ids, ids)
	loss.Backward()
	if l := loss.Item(); math.IsNaN(l) || l <= 0 {
		t.Fatalf("loss %v", l)
	}
}
