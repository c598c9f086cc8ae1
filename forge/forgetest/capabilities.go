package forgetest

// Conformance of a backend's capability table with what its kernels do:
// every kernel the table lists on a dtype runs there (forward and
// backward), and every required kernel it does not list refuses the
// dtype. A table that claims too much would send forge to a kernel that
// panics mid-step; one that claims too little would hide a kernel behind
// a slower composition or a wrong "cannot compute" error.

import (
	"fmt"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
)

// capCase runs a kernel's op on operands of dtype dt (on the default
// device); it panics (a forge error) where the device cannot.
type capCase struct {
	kernel string
	run    func(dt forge.DType)
}

// capInput is a (2, 4) tensor of dt on the default device, made by
// copying float32 values (so it needs KernelCopy on dt).
func capInput(dt forge.DType, shape ...int) *forge.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i%7)*0.25 - 0.5
	}
	return forge.FromSlice(v, shape...).To(forge.DefaultDevice()).Cast(dt)
}

// capGrad runs y's backward with a gradient of ones, if y takes one.
func capGrad(y *forge.Tensor, xs ...*forge.Tensor) {
	y.Backward(forge.OnesLike(y))
	for _, x := range xs {
		x.Grad().Cast(forge.Float32).Float32s()
	}
}

func capCases() []capCase {
	req := func(dt forge.DType, shape ...int) *forge.Tensor { return capInput(dt, shape...).RequiresGrad() }
	return []capCase{
		{backend.KernelFill, func(dt forge.DType) { forge.FullOf(dt, 1, 2, 3).Cast(forge.Float32).Float32s() }},
		{backend.KernelCopy, func(dt forge.DType) { capInput(dt, 2, 4).T().Contiguous().Cast(forge.Float32).Float32s() }},
		{backend.KernelUnary, func(dt forge.DType) { x := req(dt, 2, 4); capGrad(x.Exp(), x) }},
		{backend.KernelBinary, func(dt forge.DType) { x, y := req(dt, 2, 4), req(dt, 2, 4); capGrad(x.Mul(y), x, y) }},
		{backend.KernelWhere, func(dt forge.DType) {
			x := capInput(dt, 2, 4)
			forge.Where(capInput(dt, 2, 4), x, x).Cast(forge.Float32).Float32s()
		}},
		{backend.KernelReduce, func(dt forge.DType) { capInput(dt, 2, 4).Max(1).Cast(forge.Float32).Float32s() }},
		{backend.KernelMatMul, func(dt forge.DType) { x, y := req(dt, 2, 4), req(dt, 4, 3); capGrad(x.MatMul(y), x, y) }},
		{backend.KernelSoftmax, func(dt forge.DType) { x := req(dt, 2, 4); capGrad(x.Softmax(-1), x) }},
		{backend.KernelLayerNorm, func(dt forge.DType) { x := req(dt, 2, 4); capGrad(forge.LayerNorm(x, nil, nil, 1e-5), x) }},
		{backend.KernelRMSNorm, func(dt forge.DType) { x := req(dt, 2, 4); capGrad(forge.RMSNorm(x, nil, 1e-5), x) }},
		{backend.KernelRoPE, func(dt forge.DType) { x := req(dt, 1, 2, 4); capGrad(forge.RoPE(x, 1), x) }},
		{backend.KernelIndex, func(dt forge.DType) {
			ids := forge.FromSlice([]int32{1, 0, 1}, 3).To(forge.DefaultDevice())
			capInput(dt, 2, 4).IndexSelect(0, ids).Cast(forge.Float32).Float32s()
		}},
		{backend.KernelAttention, func(dt forge.DType) {
			q, k, v := req(dt, 1, 2, 3, 4), req(dt, 1, 1, 3, 4), req(dt, 1, 1, 3, 4)
			capGrad(forge.Attention(q, k, v, true), q, k, v)
		}},
		{backend.KernelCrossEntropy, func(dt forge.DType) {
			x := req(dt, 2, 4)
			capGrad(forge.CrossEntropy(x, forge.FromSlice([]int32{3, 1}, 2).To(forge.DefaultDevice()), -1), x)
		}},
		{backend.KernelSumSquares, func(dt forge.DType) { capInput(dt, 2, 4).SumSquares().Float64s() }},
		{backend.KernelAdamW, func(dt forge.DType) {
			p, g, m, v := capInput(dt, 2, 4), capInput(dt, 2, 4), capInput(dt, 2, 4), capInput(dt, 2, 4)
			forge.AdamWUpdate(p, g, m, v, forge.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, Step: 1})
			p.Cast(forge.Float32).Float32s()
		}},
		{backend.KernelSwiGLU, func(dt forge.DType) { a, b := req(dt, 2, 4), req(dt, 2, 4); capGrad(forge.SwiGLU(a, b), a, b) }},
		{backend.KernelSoftplus, func(dt forge.DType) { x := req(dt, 2, 4); capGrad(x.Softplus(), x) }},
		{backend.KernelMatMulMany, func(dt forge.DType) {
			a, b := capInput(dt, 2, 4), capInput(dt, 4, 3)
			x, y := forge.MatMulPair(a, b, b.T(), a.T())
			x.Cast(forge.Float32).Float32s()
			y.Cast(forge.Float32).Float32s()
		}},
		{backend.KernelRoPEStrided, func(dt forge.DType) {
			x := req(dt, 2, 3, 4)
			capGrad(forge.RoPE(x.Transpose(0, 1), 0), x)
		}},
		{backend.KernelAttentionRowStrided, func(dt forge.DType) {
			x := req(dt, 1, 3, 2, 4) // (B, T, H, D), seen as (B, H, T, D)
			q := x.Transpose(1, 2)
			capGrad(forge.Attention(q, q, q, true), x)
		}},
		{backend.KernelGradClip, func(dt forge.DType) {
			p, g, m, v := capInput(dt, 2, 4), capInput(dt, 2, 4), capInput(dt, 2, 4), capInput(dt, 2, 4)
			c := forge.NewGradClip([]*forge.Tensor{g}, 0.5)
			forge.AdamWUpdateClipped(p, g, m, v, c, forge.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, Step: 1})
			p.Cast(forge.Float32).Float32s()
		}},
	}
}

// Capabilities checks dev's capability table against its kernels, for
// every kernel the table names and every dtype.
func Capabilities(t *testing.T, dev *forge.Device) {
	prev := forge.DefaultDevice()
	forge.SetDefaultDevice(dev)
	defer forge.SetDefaultDevice(prev)
	optional := map[string]bool{}
	for _, k := range backend.OptionalKernels {
		optional[k] = true
	}
	caps := dev.Capabilities()
	seen := map[string]bool{}
	for _, c := range capCases() {
		seen[c.kernel] = true
		for _, dt := range []forge.DType{forge.Float32, forge.Float64, forge.Int32, forge.Float16, forge.BFloat16} {
			t.Run(fmt.Sprintf("%s/%v", c.kernel, dt), func(t *testing.T) {
				err := forge.Try(func() { c.run(dt) })
				listed := caps.Has(c.kernel, dt)
				switch {
				case listed && err != nil:
					t.Errorf("%s lists %s on %v, but it fails: %v", dev.Name(), c.kernel, dt, err)
				case !listed && err == nil && !optional[c.kernel]:
					// An optional kernel not listed is composed, and
					// runs: only a required one must refuse.
					t.Errorf("%s runs %s on %v, but its capability table does not list it (it lists %v)", dev.Name(), c.kernel, dt, caps[c.kernel])
				}
			})
		}
	}
	for _, k := range caps.Kernels() {
		if !seen[k] {
			t.Errorf("%s lists kernel %q, which forgetest does not know: add a case to capCases", dev.Name(), k)
		}
	}
}
