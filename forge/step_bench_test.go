package forge

import (
	"math"
	"testing"
)

// tinyGPT is the "tiny" model of ../shared/bench/torch_gpt_step.py written
// with the public ops: V512 d128 L4 H4 T128 B16, SwiGLU 512, RMSNorm, RoPE,
// tied head. It exists to measure the tensor core end to end.
type tinyGPT struct {
	wte                      *Tensor // (V, C)
	ln1, ln2, wqkv, wo       []*Tensor
	wgate, wup, wdown        []*Tensor
	lnf                      *Tensor
	B, T, C, H, V, L, Hidden int
}

func newTinyGPT() *tinyGPT {
	m := &tinyGPT{B: 16, T: 128, C: 128, H: 4, V: 512, L: 4, Hidden: 512}
	g := NewGenerator(1)
	p := func(std float64, shape ...int) *Tensor {
		return g.Randn(Float32, shape...).MulScalar(std).RequiresGrad()
	}
	res := 0.02 / math.Sqrt(2*float64(m.L))
	m.wte = p(0.02, m.V, m.C)
	for range m.L {
		m.ln1 = append(m.ln1, Ones(m.C).RequiresGrad())
		m.ln2 = append(m.ln2, Ones(m.C).RequiresGrad())
		m.wqkv = append(m.wqkv, p(0.02, m.C, 3*m.C))
		m.wo = append(m.wo, p(res, m.C, m.C))
		m.wgate = append(m.wgate, p(0.02, m.C, m.Hidden))
		m.wup = append(m.wup, p(0.02, m.C, m.Hidden))
		m.wdown = append(m.wdown, p(res, m.Hidden, m.C))
	}
	m.lnf = Ones(m.C).RequiresGrad()
	return m
}

func (m *tinyGPT) loss(ids, targets *Tensor) *Tensor {
	B, T, C, H := m.B, m.T, m.C, m.H
	D := C / H
	x := Embedding(ids, m.wte) // (B, T, C)
	for l := range m.L {
		h := RMSNorm(x, m.ln1[l], 1e-5)
		qkv := h.MatMul(m.wqkv[l]).Reshape(B, T, 3, H, D).Permute(2, 0, 3, 1, 4) // (3, B, H, T, D)
		q, k, v := RoPE(qkv.Index(0, 0), 0), RoPE(qkv.Index(0, 1), 0), qkv.Index(0, 2)
		a := Attention(q, k, v, true).Transpose(1, 2).Reshape(B, T, C)
		x = x.Add(a.MatMul(m.wo[l]))
		h = RMSNorm(x, m.ln2[l], 1e-5)
		f := h.MatMul(m.wgate[l]).SiLU().Mul(h.MatMul(m.wup[l]))
		x = x.Add(f.MatMul(m.wdown[l]))
	}
	x = RMSNorm(x, m.lnf, 1e-5)
	logits := x.MatMul(m.wte.T()) // (B, T, V)
	return CrossEntropy(logits, targets, -1)
}

// BenchmarkTinyStep times forward + backward of the tiny GPT (no optimizer)
// and reports tokens/s.
func BenchmarkTinyStep(b *testing.B) {
	m := newTinyGPT()
	g := NewGenerator(2)
	ids := g.RandInt(0, m.V, m.B, m.T)
	targets := g.RandInt(0, m.V, m.B, m.T)
	for i := 0; i < b.N; i++ {
		m.loss(ids, targets).Backward()
	}
	b.ReportMetric(float64(m.B*m.T*b.N)/b.Elapsed().Seconds(), "tok/s")
}
