package train

import (
	"math"
	"strconv"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/safetensors"
)

// TestQATMatchesPyTorch compares fake quantisation with PyTorch
// (tests/torch_qat.py, `make golden`): a Linear's levels, scales and
// fake-quantised weight, its output and the straight-through gradients;
// then a small GPT with every block Linear quantised, its loss and every
// gradient. int8's levels, scales and q are exact functions of w (each
// step one correctly rounded operation) and are compared bit for bit;
// the ternary scale is a mean whose summation order differs, compared
// within the n-term float32 sum bound. Products and gradients are
// compared like TestStepMatchesPyTorch's, relative to the largest value.
func TestQATMatchesPyTorch(t *testing.T) {
	fx, err := safetensors.ReadFile("testdata/torch_qat.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) ([]float32, []int) {
		tt, ok := fx.Get(name)
		if !ok {
			t.Fatalf("fixture has no %s", name)
		}
		v, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v, tt.Shape
	}
	tensor := func(name string) *forge.Tensor {
		v, sh := get(name)
		return forge.FromSlice(v, sh...)
	}
	floats := func(name string) []float32 { v, _ := get(name); return v }
	for _, mode := range []string{"int8", "ternary"} {
		p := "linear." + mode + "."
		l := &nn.Linear{Weight: tensor(p + "w").RequiresGrad(), Bias: tensor(p + "b").RequiresGrad(), Quant: mode}
		x, up := tensor(p+"x").RequiresGrad(), tensor(p+"upstream")
		y := l.Forward(x)
		y.Mul(up).Sum().Backward()
		lv, sc := forge.Quantize(l.Weight, mode)
		q := forge.FakeQuant(l.Weight, mode)
		wantS := floats(p + "scale")
		if mode == "int8" {
			exact(t, p+"scale", sc.Float32s(), wantS)
			exact(t, p+"q", q.Float32s(), floats(p+"q"))
		} else {
			n := float64(l.Weight.Numel())
			u := math.Ldexp(1, -24)
			got, want := float64(sc.Float32s()[0]), float64(wantS[0])
			if d := math.Abs(got - want); d > 2*n*u*want {
				t.Errorf("%sscale %v, PyTorch %v (off by %.1e > %.1e)", p, got, want, d, 2*n*u*want)
			}
			if d := relDiff(q.Float32s(), floats(p+"q")); d > 2*n*u {
				t.Errorf("%sq differs by %.1e", p, d)
			}
		}
		exact(t, p+"levels", lv.Float32s(), floats(p+"levels"))
		for _, c := range []struct {
			name string
			got  *forge.Tensor
		}{{"y", y}, {"grad.w", l.Weight.Grad()}, {"grad.b", l.Bias.Grad()}, {"grad.x", x.Grad()}} {
			if d := relDiff(c.got.Float32s(), floats(p+c.name)); d > 1e-5 {
				t.Errorf("%s%s differs by %.1e (relative)", p, c.name, d)
			}
		}

		// The GPT.
		c := gpt.DefaultConfig()
		c.Vocab, c.Context, c.Dim, c.Layers, c.Heads, c.FFNHidden, c.Quant = 128, 16, 64, 2, 4, 192, mode
		m, err := gpt.New(c, 1)
		if err != nil {
			t.Fatal(err)
		}
		hashInitModel(m)
		ids, _ := fx.Get("gpt.ids")
		tg, _ := fx.Get("gpt.targets")
		iv, _ := ids.Int32s()
		tv, _ := tg.Int32s()
		loss := m.Loss(forge.FromSlice(iv, 2, 16), forge.FromSlice(tv, 2, 16))
		loss.Backward()
		want, _ := strconv.ParseFloat(fx.Metadata["gpt."+mode+".loss"], 64)
		if rel := math.Abs(loss.Item()-want) / want; rel > 1e-5 {
			t.Errorf("gpt %s: loss %.7f, PyTorch %.7f (rel %.1e)", mode, loss.Item(), want, rel)
		}
		worst := 0.0
		for _, pr := range m.Params() {
			d := relDiff(pr.Tensor.Grad().Float32s(), floats("gpt."+mode+".grad."+pr.Name))
			worst = max(worst, d)
			if d > 1e-4 {
				t.Errorf("gpt %s: gradient of %s differs by %.1e (relative)", mode, pr.Name, d)
			}
		}
		t.Logf("%s: loss %.7f (PyTorch %.7f), worst relative gradient difference %.1e", mode, loss.Item(), want, worst)
	}
}

// exact fails unless got and want are bit for bit equal.
func exact(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("%s[%d] = %v, PyTorch %v (bit for bit)", what, i, got[i], want[i])
			return
		}
	}
}
