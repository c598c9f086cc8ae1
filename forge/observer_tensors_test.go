package forge

import (
	"slices"
	"testing"
)

// TestObserverTensors: Observer.Tensors sees each kernel's operands — the
// matmul's two factors and its product, the attention backward's inputs
// (its saved output and log-sum-exp among them) and its three gradients —
// and is the only callback an observer needs. The operands are valid
// during the call only (backward frees its temporaries), so the test
// keeps copies of the outputs' values.
func TestObserverTensors(t *testing.T) {
	type seen struct {
		kernel string
		in     []*Tensor
		out    [][]float32
	}
	var calls []seen
	prev := SetObserver(Observer{Tensors: func(c KernelCall, in, out []*Tensor) {
		var vals [][]float32
		for _, o := range out {
			vals = append(vals, o.Float32s())
		}
		calls = append(calls, seen{c.Kernel, in, vals})
	}})
	defer SetObserver(prev)

	a, b := Randn(2, 3), Randn(3, 4)
	calls = nil
	p := a.MatMul(b)
	if len(calls) != 1 || calls[0].kernel != "matmul" || !slices.Equal(calls[0].in, []*Tensor{a, b}) ||
		len(calls[0].out) != 1 || !slices.Equal(calls[0].out[0], p.Float32s()) {
		t.Fatalf("matmul: observed %+v", calls)
	}

	q := Randn(1, 2, 4, 8).RequiresGrad()
	k := Randn(1, 2, 4, 8).RequiresGrad()
	v := Randn(1, 2, 4, 8).RequiresGrad()
	o := Attention(q, k, v, true)
	calls = nil
	o.Backward(OnesLike(o))
	var bwd *seen
	for i := range calls {
		if calls[i].kernel == "attention.backward" {
			bwd = &calls[i]
		}
	}
	if bwd == nil {
		t.Fatalf("no attention.backward among %d kernels", len(calls))
	}
	if len(bwd.in) != 6 || len(bwd.out) != 3 {
		t.Fatalf("attention.backward: %d inputs, %d outputs; want q, k, v, out, lse, g and dq, dk, dv", len(bwd.in), len(bwd.out))
	}
	for i, leaf := range []*Tensor{q, k, v} {
		if !slices.Equal(bwd.out[i], leaf.Grad().Float32s()) {
			t.Errorf("attention.backward output %d is not the gradient of input %d", i, i)
		}
	}
}
