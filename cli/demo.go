package cli

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/forgeml/forge/forge"
)

// demo walks through the tensor core.
func cmdDemo(e *env, args []string) error {
	fs := flags(e, "demo")
	device := deviceFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("demo takes no arguments, got %q", strings.Join(pos, " "))
	}
	if err := e.useDevice(*device); err != nil {
		return err
	}
	return forge.Try(func() { demo(e.stdout) })
}

func demo(w io.Writer) {
	forge.Seed(1)
	dev := forge.DefaultDevice()
	fmt.Fprintf(w, "Forge %s on device %q\n\n", Version, dev.Name())

	fmt.Fprintln(w, "# Tensors print like PyTorch's")
	x := forge.Arange(0, 6, 1).Reshape(2, 3)
	fmt.Fprintln(w, "x =", x)
	fmt.Fprintln(w, "x.T() =", x.T(), "  (a view: no copy)")
	fmt.Fprintln(w, "x + [10 20 30] =", x.Add(forge.FromSlice([]float32{10, 20, 30})))
	fmt.Fprintln(w)

	fmt.Fprintln(w, "# Autograd: d/dw of sum(tanh(x @ w))")
	wt := forge.Randn(3, 2).SetName("w").RequiresGrad()
	y := x.MatMul(wt).Tanh().Sum()
	y.Backward()
	fmt.Fprintln(w, "y =", y)
	fmt.Fprintln(w, "w.Grad() =", wt.Grad())
	fmt.Fprintln(w)

	fmt.Fprintln(w, "# GPT building blocks: embedding, RMSNorm, RoPE, causal attention, cross-entropy")
	const B, T, C, H, V = 2, 8, 16, 4, 32
	table := forge.Randn(V, C).MulScalar(0.1).Detach().SetName("wte").RequiresGrad()
	ids := forge.RandInt(0, V, B, T)
	h := forge.Embedding(ids, table)                                 // (B, T, C)
	h = forge.RMSNorm(h, nil, 1e-6)                                  // (B, T, C)
	q := h.Reshape(B, T, H, C/H).Transpose(1, 2)                     // (B, H, T, D)
	q = forge.RoPE(q, 0)                                             // rotary positions
	att := forge.Attention(q, q, q, true)                            // (B, H, T, D)
	logits := att.Transpose(1, 2).Reshape(B, T, C).MatMul(table.T()) // (B, T, V), tied head
	targets := forge.RandInt(0, V, B, T)
	loss := forge.CrossEntropy(logits, targets, -1)
	loss.Backward()
	fmt.Fprintf(w, "loss = %.4f (uniform guess would be ln %d = %.4f)\n", loss.Item(), V, math.Log(V))
	fmt.Fprintln(w, "wte grad:", table.Grad().Stats())
	fmt.Fprintln(w)

	fmt.Fprintln(w, "# Training a two-layer MLP by hand to fit y = sin(3x)")
	xs := forge.Arange(-1, 1, 1.0/64).Reshape(-1, 1) // (128, 1)
	ys := xs.MulScalar(3)
	forge.NoGrad(func() { ys = sinApprox(ys) })
	w1 := forge.Randn(1, 32).SetName("w1").RequiresGrad()
	b1 := forge.Zeros(32).SetName("b1").RequiresGrad()
	w2 := forge.Randn(32, 1).MulScalar(0.2).Detach().SetName("w2").RequiresGrad()
	params := []*forge.Tensor{w1, b1, w2}
	start := time.Now()
	for step := 0; step <= 300; step++ {
		pred := xs.MatMul(w1).Add(b1).Tanh().MatMul(w2)
		l := pred.Sub(ys).Square().Mean()
		for _, p := range params {
			p.ZeroGrad()
		}
		l.Backward()
		forge.NoGrad(func() {
			for _, p := range params {
				p.CopyFrom(p.Sub(p.Grad().MulScalar(0.1))) // p -= lr·grad, in place
			}
		})
		if step%50 == 0 {
			fmt.Fprintf(w, "step %3d  loss %.5f\n", step, l.Item())
		}
	}
	fmt.Fprintf(w, "301 steps in %v\n", time.Since(start).Round(time.Millisecond))
}

// sinApprox returns sin(x) built from tensor ops (a 7th-order Taylor
// series around 0, accurate to 1e-3 on [-3, 3] after range folding is not
// needed here: |x| ≤ 3).
func sinApprox(x *forge.Tensor) *forge.Tensor {
	x2 := x.Square()
	// sin x ≈ x − x³/6 + x⁵/120 − x⁷/5040 + x⁹/362880
	t := x2.MulScalar(1.0 / 362880).AddScalar(-1.0 / 5040)
	t = t.Mul(x2).AddScalar(1.0 / 120)
	t = t.Mul(x2).AddScalar(-1.0 / 6)
	t = t.Mul(x2).AddScalar(1)
	return t.Mul(x)
}
