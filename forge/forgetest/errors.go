package forgetest

// The error contract (DESIGN.md, "The tensor core": errors): misuse panics
// with a *forge.Error whose message starts "forge: <op>: " and names the
// shapes involved; forge.Try turns that panic into the same error, turns
// any other panic into an error too, and leaves the library usable (grad
// mode and phase restored).

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
)

// badCase is one misuse of the API.
type badCase struct {
	name string
	op   string   // the message must start "forge: <op>: "
	want []string // substrings the message must contain (shapes, values)
	// exact, if set, is the whole message expected.
	exact string
	// f64 marks cases that need float64 tensors on the device; device,
	// cases that mix the device with another one. For those the message
	// must also name both devices.
	f64, device bool
	// mayWork marks calls whose meaning is debatable (axis 0 of a 0-d
	// tensor): they may succeed, but if they panic it must be with a
	// *forge.Error of op, never a crash.
	mayWork bool
	fn      func(e badEnv)
}

// badEnv makes the operands of the bad calls on the device under test
// (and on a second device, an alias of it, for device mismatches).
type badEnv struct {
	dev, other *forge.Device
}

// o32 returns float32 zeros of shape on the other device.
func (e badEnv) o32(shape ...int) *forge.Tensor {
	return forge.ZerosOf(forge.Float32, shape...).To(e.other)
}

// f32 returns float32 zeros of shape on the device.
func (e badEnv) f32(shape ...int) *forge.Tensor {
	return forge.ZerosOf(forge.Float32, shape...).To(e.dev)
}

// f64 returns float64 zeros of shape on the device.
func (e badEnv) f64(shape ...int) *forge.Tensor {
	return forge.ZerosOf(forge.Float64, shape...).To(e.dev)
}

// i32 returns an int32 tensor of the given values and shape on the device.
func (e badEnv) i32(v []int32, shape ...int) *forge.Tensor {
	return forge.FromSlice(v, shape...).To(e.dev)
}

// scalar returns a 0-d float32 tensor on the device.
func (e badEnv) scalar() *forge.Tensor { return e.f32(1).Reshape() }

// leaf returns float32 zeros of shape that require a gradient.
func (e badEnv) leaf(shape ...int) *forge.Tensor { return e.f32(shape...).RequiresGrad() }

// badCases lists every misuse the suite checks.
func badCases() []badCase {
	return []badCase{
		// Mismatched shapes.
		{name: "shape/add", op: "add", want: []string{"[2 3]", "[4 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Add(e.f32(4, 3)) }},
		{name: "shape/sub", op: "sub", want: []string{"[2 3]", "[3 2]"},
			fn: func(e badEnv) { e.f32(2, 3).Sub(e.f32(3, 2)) }},
		{name: "shape/mul", op: "mul", want: []string{"[4]", "[3]"},
			fn: func(e badEnv) { e.f32(4).Mul(e.f32(3)) }},
		{name: "shape/div", op: "div", want: []string{"[2 3 4]", "[2 4]"},
			fn: func(e badEnv) { e.f32(2, 3, 4).Div(e.f32(2, 4)) }},
		{name: "shape/pow", op: "pow", want: []string{"[5]", "[2 4]"},
			fn: func(e badEnv) { e.f32(5).Pow(e.f32(2, 4)) }},
		{name: "shape/maximum", op: "maximum", want: []string{"[2 3]", "[2]"},
			fn: func(e badEnv) { e.f32(2, 3).Maximum(e.f32(2)) }},
		{name: "shape/lt", op: "lt", want: []string{"[3 2]", "[4 2]"},
			fn: func(e badEnv) { e.f32(3, 2).Lt(e.f32(4, 2)) }},
		{name: "shape/where", op: "where", want: []string{"[2 3]", "[3 2]"},
			fn: func(e badEnv) { forge.Where(e.f32(2, 3), e.f32(3, 2), e.f32(2, 3)) }},
		{name: "shape/where_b", op: "where", want: []string{"[2 3]", "[4]"},
			fn: func(e badEnv) { forge.Where(e.f32(2, 3), e.f32(2, 3), e.f32(4)) }},
		{name: "shape/masked_fill", op: "masked_fill", want: []string{"[4]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).MaskedFill(e.f32(4), 1) }},
		{name: "shape/masked_fill_grows", op: "masked_fill", want: []string{"[2 2 3]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).MaskedFill(e.f32(2, 2, 3), 1) }},
		{name: "shape/matmul_inner", op: "matmul", exact: "forge: matmul: inner dimensions differ: [2 3] @ [4 5]",
			fn: func(e badEnv) { e.f32(2, 3).MatMul(e.f32(4, 5)) }},
		{name: "shape/matmul_batched_inner", op: "matmul", want: []string{"[2 2 3]", "[4 5]"},
			fn: func(e badEnv) { e.f32(2, 2, 3).MatMul(e.f32(4, 5)) }},
		{name: "shape/matmul_batch", op: "matmul", want: []string{"[2 2 3]", "[3 3 4]"},
			fn: func(e badEnv) { e.f32(2, 2, 3).MatMul(e.f32(3, 3, 4)) }},
		{name: "shape/concat", op: "concat", want: []string{"[2 3]", "[2 4]"},
			fn: func(e badEnv) { forge.Concat(0, e.f32(2, 3), e.f32(2, 4)) }},
		{name: "shape/concat_rank", op: "concat", want: []string{"[2 3]", "[3]"},
			fn: func(e badEnv) { forge.Concat(0, e.f32(2, 3), e.f32(3)) }},
		{name: "shape/stack", op: "stack", want: []string{"[2 3]", "[3 2]"},
			fn: func(e badEnv) { forge.Stack(0, e.f32(2, 3), e.f32(3, 2)) }},
		{name: "shape/layer_norm_weight", op: "layer_norm", want: []string{"[2 3]", "[4]"},
			fn: func(e badEnv) { forge.LayerNorm(e.f32(2, 3), e.f32(4), nil, 1e-5) }},
		{name: "shape/layer_norm_bias", op: "layer_norm", want: []string{"[2 3]", "[2]"},
			fn: func(e badEnv) { forge.LayerNorm(e.f32(2, 3), e.f32(3), e.f32(2), 1e-5) }},
		{name: "shape/rms_norm_weight", op: "rms_norm", want: []string{"[2 3]", "[4]"},
			fn: func(e badEnv) { forge.RMSNorm(e.f32(2, 3), e.f32(4), 1e-5) }},
		{name: "shape/swiglu", op: "swiglu", want: []string{"[2 3]", "[3]"},
			fn: func(e badEnv) { forge.SwiGLU(e.f32(2, 3), e.f32(3)) }},
		{name: "shape/adamw", op: "adamw", want: []string{"[2 3]", "[3 2]"},
			fn: func(e badEnv) {
				forge.AdamWUpdate(e.f32(2, 3), e.f32(3, 2), e.f32(2, 3), e.f32(2, 3), forge.AdamWParams{Step: 1})
			}},
		{name: "shape/attention_kv", op: "attention", want: []string{"[1 2 3 4]", "[1 2 5 4]"},
			fn: func(e badEnv) { forge.Attention(e.f32(1, 2, 3, 4), e.f32(1, 2, 3, 4), e.f32(1, 2, 5, 4), false) }},
		{name: "shape/attention_head_dim", op: "attention", want: []string{"[1 2 3 4]", "[1 2 3 8]"},
			fn: func(e badEnv) { forge.Attention(e.f32(1, 2, 3, 4), e.f32(1, 2, 3, 8), e.f32(1, 2, 3, 8), false) }},
		{name: "shape/attention_heads", op: "attention", want: []string{"[1 3 2 4]", "[1 2 2 4]"},
			fn: func(e badEnv) { forge.Attention(e.f32(1, 3, 2, 4), e.f32(1, 2, 2, 4), e.f32(1, 2, 2, 4), false) }},
		{name: "shape/attention_causal_long_query", op: "attention", want: []string{"[1 1 5 4]", "[1 1 3 4]"},
			fn: func(e badEnv) { forge.Attention(e.f32(1, 1, 5, 4), e.f32(1, 1, 3, 4), e.f32(1, 1, 3, 4), true) }},
		{name: "shape/cross_entropy_targets", op: "cross_entropy", want: []string{"[2 5]", "[3]"},
			fn: func(e badEnv) { forge.CrossEntropy(e.f32(2, 5), e.i32([]int32{0, 1, 2}, 3), -100) }},
		{name: "shape/gather_indices", op: "gather", want: []string{"[3 3]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Gather(1, e.i32(make([]int32, 9), 3, 3)) }},
		{name: "shape/expand", op: "expand", want: []string{"[2 3]", "[4 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Expand(4, 3) }},
		{name: "shape/expand_fewer_axes", op: "expand", want: []string{"[2 3]", "[3]"},
			fn: func(e badEnv) { e.f32(2, 3).Expand(3) }},
		{name: "shape/backward_upstream", op: "backward", want: []string{"[2 3]", "[3 2]"},
			fn: func(e badEnv) { e.leaf(3, 2).Permute(1, 0).Backward(e.f32(3, 2)) }},
		{name: "shape/set_grad", op: "set_grad", want: []string{"[2 3]", "[3 2]"},
			fn: func(e badEnv) { e.leaf(2, 3).SetGrad(e.f32(3, 2)) }},

		// Mismatched devices (the other device is an alias of the first:
		// forge must still refuse to mix them).
		{name: "device/add", op: "add", device: true, want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Add(e.o32(2, 3)) }},
		{name: "device/matmul", op: "matmul", device: true, want: []string{"[2 3]", "[3 4]"},
			fn: func(e badEnv) { e.f32(2, 3).MatMul(e.o32(3, 4)) }},
		{name: "device/concat", op: "concat", device: true, want: []string{"[2 3]"},
			fn: func(e badEnv) { forge.Concat(0, e.f32(2, 3), e.o32(2, 3)) }},
		{name: "device/where_cond", op: "where", device: true, want: []string{"[2 3]"},
			fn: func(e badEnv) { forge.Where(e.o32(2, 3), e.f32(2, 3), e.f32(2, 3)) }},
		{name: "device/masked_fill", op: "masked_fill", device: true, want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).MaskedFill(e.o32(2, 3), 1) }},
		{name: "device/index_select", op: "index_select", device: true, want: []string{"[3 4]", "[2]"},
			fn: func(e badEnv) { e.f32(3, 4).IndexSelect(0, e.i32([]int32{0, 1}, 2).To(e.other)) }},
		{name: "device/gather", op: "gather", device: true, want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Gather(1, e.i32(make([]int32, 6), 2, 3).To(e.other)) }},
		{name: "device/embedding", op: "embedding", device: true, want: []string{"[5 4]", "[2]"},
			fn: func(e badEnv) { forge.Embedding(e.i32([]int32{0, 1}, 2).To(e.other), e.f32(5, 4)) }},
		{name: "device/cross_entropy", op: "cross_entropy", device: true, want: []string{"[2 5]", "[2]"},
			fn: func(e badEnv) { forge.CrossEntropy(e.f32(2, 5), e.i32([]int32{0, 1}, 2).To(e.other), -100) }},
		{name: "device/layer_norm_weight", op: "layer_norm", device: true, want: []string{"[2 3]", "[3]"},
			fn: func(e badEnv) { forge.LayerNorm(e.f32(2, 3), e.o32(3), nil, 1e-5) }},
		{name: "device/attention", op: "attention", device: true, want: []string{"[1 1 2 4]"},
			fn: func(e badEnv) { forge.Attention(e.f32(1, 1, 2, 4), e.f32(1, 1, 2, 4), e.o32(1, 1, 2, 4), false) }},
		{name: "device/backward_upstream", op: "backward", device: true, want: []string{"[2 3]"},
			fn: func(e badEnv) { e.leaf(3, 2).Permute(1, 0).Backward(e.o32(2, 3)) }},
		{name: "device/set_grad", op: "set_grad", device: true, want: []string{"[2 3]"},
			fn: func(e badEnv) { e.leaf(2, 3).SetGrad(e.o32(2, 3)) }},
		{name: "device/copy_from", op: "copy_from", device: true, want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).CopyFrom(e.o32(2, 3)) }},

		// CopyFrom, the one in-place write.
		{name: "copy_from/shape", op: "copy_from", want: []string{"[4]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).CopyFrom(e.f32(4)) }},
		{name: "copy_from/grows", op: "copy_from", want: []string{"[2 2 3]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).CopyFrom(e.f32(2, 2, 3)) }},
		{name: "copy_from/recording", op: "copy_from", want: []string{"[2 3]"},
			fn: func(e badEnv) { e.leaf(2, 3).CopyFrom(e.f32(2, 3)) }},

		// Mismatched dtypes.
		{name: "dtype/add_f32_f64", op: "add", f64: true, want: []string{"float32", "float64", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Add(e.f64(2, 3)) }},
		{name: "dtype/mul_f64_f32", op: "mul", f64: true, want: []string{"float32", "float64", "[3]", "[2 3]"},
			fn: func(e badEnv) { e.f64(3).Mul(e.f32(2, 3)) }},
		{name: "dtype/matmul", op: "matmul", f64: true, want: []string{"float32", "float64", "[2 3]", "[3 4]"},
			fn: func(e badEnv) { e.f32(2, 3).MatMul(e.f64(3, 4)) }},
		{name: "dtype/where", op: "where", f64: true, want: []string{"float32", "float64"},
			fn: func(e badEnv) { forge.Where(e.f32(2, 3), e.f32(2, 3), e.f64(2, 3)) }},
		{name: "dtype/concat", op: "concat", f64: true, want: []string{"float32", "float64", "[2 3]"},
			fn: func(e badEnv) { forge.Concat(0, e.f32(2, 3), e.f64(2, 3)) }},
		{name: "dtype/layer_norm_weight", op: "layer_norm", f64: true, want: []string{"float32", "float64", "[3]"},
			fn: func(e badEnv) { forge.LayerNorm(e.f32(2, 3), e.f64(3), nil, 1e-5) }},
		{name: "dtype/attention", op: "attention", f64: true, want: []string{"float32", "float64", "[1 1 2 4]"},
			fn: func(e badEnv) { forge.Attention(e.f32(1, 1, 2, 4), e.f64(1, 1, 2, 4), e.f32(1, 1, 2, 4), false) }},
		{name: "dtype/backward_upstream", op: "backward", f64: true, want: []string{"float32", "float64", "[2 3]"},
			fn: func(e badEnv) { e.leaf(3, 2).Permute(1, 0).Backward(e.f64(2, 3)) }},
		{name: "dtype/set_grad", op: "set_grad", f64: true, want: []string{"float32", "float64", "[2 3]"},
			fn: func(e badEnv) { e.leaf(2, 3).SetGrad(e.f64(2, 3)) }},
		{name: "dtype/float32s_of_float64", op: "float32s", f64: true, want: []string{"float64"},
			fn: func(e badEnv) { e.f64(2, 3).Float32s() }},
		{name: "dtype/exp_int", op: "exp", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { e.i32(make([]int32, 6), 2, 3).Exp() }},
		{name: "dtype/add_int", op: "add", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { e.i32(make([]int32, 6), 2, 3).Add(e.i32(make([]int32, 6), 2, 3)) }},
		{name: "dtype/add_f32_int", op: "add", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Add(e.i32(make([]int32, 6), 2, 3)) }},
		{name: "dtype/sum_int", op: "sum", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { e.i32(make([]int32, 6), 2, 3).Sum() }},
		{name: "dtype/mean_int", op: "mean", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { e.i32(make([]int32, 6), 2, 3).Mean(0) }},
		{name: "dtype/max_int", op: "max", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { e.i32(make([]int32, 6), 2, 3).Max() }},
		{name: "dtype/softmax_int", op: "softmax", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { e.i32(make([]int32, 6), 2, 3).Softmax(-1) }},
		{name: "dtype/matmul_int", op: "matmul", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { e.i32(make([]int32, 6), 2, 3).MatMul(e.i32(make([]int32, 6), 3, 2)) }},
		{name: "dtype/layer_norm_int", op: "layer_norm", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { forge.LayerNorm(e.i32(make([]int32, 6), 2, 3), nil, nil, 1e-5) }},
		{name: "dtype/layer_norm_weight_int", op: "layer_norm", want: []string{"int32", "[3]"},
			fn: func(e badEnv) { forge.LayerNorm(e.f32(2, 3), e.i32(make([]int32, 3), 3), nil, 1e-5) }},
		{name: "dtype/rms_norm_int", op: "rms_norm", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { forge.RMSNorm(e.i32(make([]int32, 6), 2, 3), nil, 1e-5) }},
		{name: "dtype/swiglu_int", op: "swiglu", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { forge.SwiGLU(e.i32(make([]int32, 6), 2, 3), e.f32(2, 3)) }},
		{name: "dtype/sum_squares_int", op: "sum_squares", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { e.i32(make([]int32, 6), 2, 3).SumSquares() }},
		{name: "dtype/rope_int", op: "rope", want: []string{"int32", "[2 4]"},
			fn: func(e badEnv) { forge.RoPE(e.i32(make([]int32, 8), 2, 4), 0) }},
		{name: "dtype/dropout_int", op: "dropout", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { forge.Dropout(e.i32(make([]int32, 6), 2, 3), 0.5, nil) }},
		{name: "dtype/cross_entropy_logits_int", op: "cross_entropy", want: []string{"int32", "[2 5]"},
			fn: func(e badEnv) { forge.CrossEntropy(e.i32(make([]int32, 10), 2, 5), e.i32([]int32{0, 1}, 2), -100) }},
		{name: "dtype/cross_entropy_targets_float", op: "cross_entropy", want: []string{"float32", "[2]", "[2 5]"},
			fn: func(e badEnv) { forge.CrossEntropy(e.f32(2, 5), e.f32(2), -100) }},
		{name: "dtype/index_select_float_indices", op: "index_select", want: []string{"float32", "[2]"},
			fn: func(e badEnv) { e.f32(3, 4).IndexSelect(0, e.f32(2)) }},
		{name: "dtype/gather_float_indices", op: "gather", want: []string{"float32", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Gather(1, e.f32(2, 3)) }},
		{name: "dtype/embedding_float_ids", op: "embedding", want: []string{"float32", "[2]"},
			fn: func(e badEnv) { forge.Embedding(e.f32(2), e.f32(5, 4)) }},
		{name: "dtype/masked_fill_int", op: "masked_fill", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { e.i32(make([]int32, 6), 2, 3).MaskedFill(e.f32(2, 3), 1) }},
		{name: "dtype/int32s_of_float", op: "int32s", want: []string{"float32"},
			fn: func(e badEnv) { e.f32(2, 3).Int32s() }},
		{name: "dtype/randn_int", op: "randn", want: []string{"int32"},
			fn: func(e badEnv) { forge.NewGenerator(1).Randn(forge.Int32, 2, 3) }},
		{name: "dtype/cast_unknown", op: "cast", want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Cast(forge.DType(9)) }},

		// Out-of-range axes.
		{name: "axis/sum", op: "sum", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Sum(2) }},
		{name: "axis/sum_negative", op: "sum", want: []string{"-3", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).SumKeep(-3) }},
		{name: "axis/sum_repeated", op: "sum", want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Sum(0, -2) }},
		{name: "axis/mean", op: "mean", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Mean(2) }},
		{name: "axis/var", op: "var", want: []string{"5", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Var(5) }},
		{name: "axis/max", op: "max", want: []string{"5", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Max(5) }},
		{name: "axis/min", op: "min", want: []string{"-4", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).MinKeep(-4) }},
		{name: "axis/argmax", op: "argmax", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).ArgMax(2) }},
		{name: "axis/softmax", op: "softmax", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Softmax(2) }},
		{name: "axis/log_softmax", op: "log_softmax", want: []string{"-3", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).LogSoftmax(-3) }},
		{name: "axis/transpose", op: "transpose", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Transpose(0, 2) }},
		{name: "axis/permute_repeated", op: "permute", want: []string{"[0 0]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Permute(0, 0) }},
		{name: "axis/permute_out_of_range", op: "permute", want: []string{"[0 2]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Permute(0, 2) }},
		{name: "axis/permute_length", op: "permute", want: []string{"[0]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Permute(0) }},
		{name: "axis/narrow", op: "narrow", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Narrow(2, 0, 1) }},
		{name: "axis/slice", op: "slice", want: []string{"-3", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Slice(-3, 0, 1) }},
		{name: "axis/index", op: "index", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Index(2, 0) }},
		{name: "axis/concat", op: "concat", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { forge.Concat(2, e.f32(2, 3), e.f32(2, 3)) }},
		{name: "axis/stack", op: "stack", want: []string{"4", "[2 3]"},
			fn: func(e badEnv) { forge.Stack(4, e.f32(2, 3), e.f32(2, 3)) }},
		{name: "axis/split", op: "split", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Split(2, 1) }},
		{name: "axis/chunk", op: "chunk", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Chunk(2, 2) }},
		{name: "axis/squeeze", op: "squeeze", want: []string{"3", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Squeeze(3) }},
		{name: "axis/unsqueeze", op: "unsqueeze", want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Unsqueeze(4) }},
		{name: "axis/flatten", op: "flatten", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Flatten(0, 2) }},
		{name: "axis/index_select", op: "index_select", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).IndexSelect(2, e.i32([]int32{0}, 1)) }},
		{name: "axis/gather", op: "gather", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Gather(2, e.i32(make([]int32, 6), 2, 3)) }},
		{name: "axis/size", op: "size", want: []string{"2", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Size(2) }},

		// Axis 0 of a 0-d tensor: PyTorch accepts it for reductions; Forge
		// may too, or refuse with an error, but must not crash.
		{name: "scalar_axis/sum", op: "sum", mayWork: true, fn: func(e badEnv) { e.scalar().Sum(0) }},
		{name: "scalar_axis/sum_keep", op: "sum", mayWork: true, fn: func(e badEnv) { e.scalar().SumKeep(-1) }},
		{name: "scalar_axis/max", op: "max", mayWork: true, fn: func(e badEnv) { e.scalar().Max(0) }},
		{name: "scalar_axis/mean", op: "mean", mayWork: true, fn: func(e badEnv) { e.scalar().Mean(0) }},
		{name: "scalar_axis/argmax", op: "argmax", mayWork: true, fn: func(e badEnv) { e.scalar().ArgMax(0) }},
		{name: "scalar_axis/softmax", op: "softmax", mayWork: true, fn: func(e badEnv) { e.scalar().Softmax(0) }},
		{name: "scalar_axis/size", op: "size", mayWork: true, fn: func(e badEnv) { e.scalar().Size(0) }},
		{name: "scalar_axis/narrow", op: "narrow", mayWork: true, fn: func(e badEnv) { e.scalar().Narrow(0, 0, 1) }},
		{name: "scalar_axis/index", op: "index", mayWork: true, fn: func(e badEnv) { e.scalar().Index(0, 0) }},
		{name: "scalar_axis/transpose", op: "transpose", mayWork: true, fn: func(e badEnv) { e.scalar().Transpose(0, 0) }},
		{name: "scalar_axis/squeeze", op: "squeeze", mayWork: true, fn: func(e badEnv) { e.scalar().Squeeze(0) }},
		{name: "scalar_axis/concat", op: "concat", mayWork: true, fn: func(e badEnv) { forge.Concat(0, e.scalar(), e.scalar()) }},
		{name: "scalar_axis/split", op: "split", mayWork: true, fn: func(e badEnv) { e.scalar().Split(0, 1) }},
		{name: "scalar_axis/chunk", op: "chunk", mayWork: true, fn: func(e badEnv) { e.scalar().Chunk(1, 0) }},
		{name: "scalar_axis/index_select", op: "index_select", mayWork: true,
			fn: func(e badEnv) { e.scalar().IndexSelect(0, e.i32([]int32{0}, 1)) }},

		// Out-of-range indices.
		{name: "index/index_select", op: "index_select", want: []string{"3", "[3 4]"},
			fn: func(e badEnv) { e.f32(3, 4).IndexSelect(0, e.i32([]int32{0, 3}, 2)) }},
		{name: "index/index_select_negative", op: "index_select", want: []string{"-1", "[3 4]"},
			fn: func(e badEnv) { e.f32(3, 4).IndexSelect(1, e.i32([]int32{-1}, 1)) }},
		{name: "index/index_add", op: "index_add", want: []string{"3", "[3 4]"},
			fn: func(e badEnv) { e.f32(3, 4).IndexAdd(0, e.i32([]int32{0, 3}, 2), e.f32(2, 4)) }},
		{name: "shape/index_add_source", op: "index_add", want: []string{"[3 4]", "[2 3]"},
			fn: func(e badEnv) { e.f32(3, 4).IndexAdd(0, e.i32([]int32{0, 1}, 2), e.f32(2, 3)) }},
		{name: "index/gather", op: "gather", want: []string{"3", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Gather(1, e.i32([]int32{0, 1, 2, 3, 0, 0}, 2, 3)) }},
		{name: "index/embedding", op: "embedding", want: []string{"7", "[5 4]"},
			fn: func(e badEnv) { forge.Embedding(e.i32([]int32{0, 7}, 2), e.f32(5, 4)) }},
		{name: "index/embedding_negative", op: "embedding", want: []string{"-1", "[5 4]"},
			fn: func(e badEnv) { forge.Embedding(e.i32([]int32{-1}, 1, 1), e.f32(5, 4)) }},
		{name: "index/cross_entropy_target", op: "cross_entropy", want: []string{"5", "[2 5]"},
			fn: func(e badEnv) { forge.CrossEntropy(e.f32(2, 5), e.i32([]int32{1, 5}, 2), -100) }},
		{name: "index/cross_entropy_negative_target", op: "cross_entropy", want: []string{"-2", "[2 5]"},
			fn: func(e badEnv) { forge.CrossEntropy(e.f32(2, 5), e.i32([]int32{-2, 0}, 2), -100) }},
		{name: "index/index", op: "index", want: []string{"3", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Index(1, 3) }},
		{name: "index/index_negative", op: "index", want: []string{"-4", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Index(1, -4) }},

		// Wrong ranks.
		{name: "rank/attention_q", op: "attention", want: []string{"[2 3 4]"},
			fn: func(e badEnv) { forge.Attention(e.f32(2, 3, 4), e.f32(1, 2, 3, 4), e.f32(1, 2, 3, 4), false) }},
		{name: "rank/attention_scaled_k", op: "attention", want: []string{"[2 3 4]", "[1 2 3 4]"},
			fn: func(e badEnv) { forge.AttentionScaled(e.f32(1, 2, 3, 4), e.f32(2, 3, 4), e.f32(2, 3, 4), true, 0.5) }},
		{name: "rank/matmul_1d", op: "matmul", want: []string{"[3]", "[3 4]"},
			fn: func(e badEnv) { e.f32(3).MatMul(e.f32(3, 4)) }},
		{name: "rank/matmul_1d_right", op: "matmul", want: []string{"[2 3]", "[3]"},
			fn: func(e badEnv) { e.f32(2, 3).MatMul(e.f32(3)) }},
		{name: "rank/layer_norm_weight", op: "layer_norm", want: []string{"[2 3]", "[1 3]"},
			fn: func(e badEnv) { forge.LayerNorm(e.f32(2, 3), e.f32(1, 3), nil, 1e-5) }},
		{name: "rank/layer_norm_scalar", op: "layer_norm",
			fn: func(e badEnv) { forge.LayerNorm(e.scalar(), nil, nil, 1e-5) }},
		{name: "rank/rms_norm_weight", op: "rms_norm", want: []string{"[2 3]", "[3 1]"},
			fn: func(e badEnv) { forge.RMSNorm(e.f32(2, 3), e.f32(3, 1), 1e-5) }},
		{name: "rank/rope_1d", op: "rope", want: []string{"[4]"},
			fn: func(e badEnv) { forge.RoPE(e.f32(4), 0) }},
		{name: "rank/rope_odd", op: "rope", want: []string{"[2 3]"},
			fn: func(e badEnv) { forge.RoPE(e.f32(2, 3), 0) }},
		{name: "rank/embedding_table", op: "embedding", want: []string{"[5]"},
			fn: func(e badEnv) { forge.Embedding(e.i32([]int32{0}, 1), e.f32(5)) }},
		{name: "rank/index_select_indices", op: "index_select", want: []string{"[1 2]"},
			fn: func(e badEnv) { e.f32(3, 4).IndexSelect(0, e.i32([]int32{0, 1}, 1, 2)) }},
		{name: "rank/gather_indices", op: "gather", want: []string{"[2]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Gather(1, e.i32([]int32{0, 1}, 2)) }},
		{name: "rank/cross_entropy_scalar_logits", op: "cross_entropy", want: []string{"[]"},
			fn: func(e badEnv) { forge.CrossEntropy(e.scalar(), e.i32([]int32{0}, 1).Reshape(), -100) }},
		{name: "rank/item", op: "item", want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Item() }},

		// Bad arguments.
		{name: "arg/zeros_negative", op: "zeros", want: []string{"[2 -1]"},
			fn: func(e badEnv) { forge.Zeros(2, -1) }},
		{name: "arg/zeros_of_negative", op: "zeros", want: []string{"[-3]"},
			fn: func(e badEnv) { forge.ZerosOf(forge.Float64, -3) }},
		{name: "arg/from_slice_negative", op: "from_slice", want: []string{"[-2 -3]"},
			fn: func(e badEnv) { forge.FromSlice(make([]float32, 6), -2, -3) }},
		{name: "arg/from_slice_size", op: "from_slice", want: []string{"[2 2]", "3"},
			fn: func(e badEnv) { forge.FromSlice([]float32{1, 2, 3}, 2, 2) }},
		{name: "arg/from_slice_type", op: "from_slice", want: []string{"[]string"},
			fn: func(e badEnv) { forge.FromSlice([]string{"a"}) }},
		{name: "arg/from_slice_int_overflow", op: "from_slice", want: []string{"4294967296"},
			fn: func(e badEnv) { forge.FromSlice([]int{1, 1 << 32}) }},
		{name: "arg/randn_negative", op: "randn", want: []string{"[-1 2]"},
			fn: func(e badEnv) { forge.NewGenerator(1).Randn(forge.Float32, -1, 2) }},
		{name: "arg/rand_int_negative", op: "rand_int", want: []string{"[-2]"},
			fn: func(e badEnv) { forge.RandInt(0, 5, -2) }},
		{name: "arg/rand_int_empty_range", op: "rand_int", want: []string{"[3, 3)"},
			fn: func(e badEnv) { forge.RandInt(3, 3, 2) }},
		{name: "arg/intn_zero", op: "rand_int", want: []string{"0"},
			fn: func(e badEnv) { forge.NewGenerator(1).Intn(0) }},
		{name: "arg/arange_zero_step", op: "arange", want: []string{"0"},
			fn: func(e badEnv) { forge.Arange(0, 1, 0) }},
		{name: "arg/arange_infinite_stop", op: "arange", want: []string{"Inf"},
			fn: func(e badEnv) { forge.Arange(0, math.Inf(1), 1) }},
		{name: "arg/arange_nan_start", op: "arange", want: []string{"NaN"},
			fn: func(e badEnv) { forge.Arange(math.NaN(), 3, 1) }},
		{name: "arg/arange_int_negative", op: "arange", want: []string{"-1"},
			fn: func(e badEnv) { forge.ArangeInt(-1) }},
		{name: "arg/reshape_size", op: "reshape", want: []string{"[4 2]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Reshape(4, 2) }},
		{name: "arg/reshape_two_inferred", op: "reshape", want: []string{"[-1 -1]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Reshape(-1, -1) }},
		{name: "arg/reshape_negative", op: "reshape", want: []string{"[-2 -3]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Reshape(-2, -3) }},
		{name: "arg/reshape_infer_indivisible", op: "reshape", want: []string{"[4 -1]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Reshape(4, -1) }},
		{name: "arg/view_size", op: "reshape", want: []string{"[7]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).View(7) }},
		{name: "arg/narrow_past_end", op: "narrow", want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Narrow(1, 2, 2) }},
		{name: "arg/narrow_negative_length", op: "narrow", want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Narrow(1, 0, -1) }},
		{name: "arg/narrow_negative_start", op: "narrow", want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Narrow(1, -4, 1) }},
		{name: "arg/expand_negative_size", op: "expand", want: []string{"[1 3]", "[-2 3]"},
			fn: func(e badEnv) { e.f32(1, 3).Expand(-2, 3) }},
		{name: "arg/expand_new_axis_minus_one", op: "expand", want: []string{"[2 3]", "[-1 2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Expand(-1, 2, 3) }},
		{name: "arg/squeeze_not_one", op: "squeeze", want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Squeeze(1) }},
		{name: "arg/flatten_reversed", op: "flatten", want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Flatten(1, 0) }},
		{name: "arg/clamp_reversed", op: "clamp", want: []string{"2", "1"},
			fn: func(e badEnv) { e.f32(2, 3).Clamp(2, 1) }},
		{name: "arg/dropout_one", op: "dropout", want: []string{"1"},
			fn: func(e badEnv) { forge.Dropout(e.f32(2, 3), 1, nil) }},
		{name: "arg/dropout_negative", op: "dropout", want: []string{"-0.5"},
			fn: func(e badEnv) { forge.Dropout(e.f32(2, 3), -0.5, nil) }},
		{name: "arg/dropout_nan", op: "dropout", want: []string{"NaN"},
			fn: func(e badEnv) { forge.Dropout(e.f32(2, 3), math.NaN(), nil) }},
		{name: "arg/split_sum", op: "split", want: []string{"[1 1]", "[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Split(1, 1, 1) }},
		{name: "arg/split_negative", op: "split", want: []string{"[4 -1]"},
			fn: func(e badEnv) { e.f32(2, 3).Split(1, 4, -1) }},
		{name: "arg/chunk_zero", op: "chunk", want: []string{"0"},
			fn: func(e badEnv) { e.f32(2, 3).Chunk(0, 1) }},
		{name: "arg/concat_none", op: "concat", fn: func(e badEnv) { forge.Concat(0) }},
		{name: "arg/stack_none", op: "stack", fn: func(e badEnv) { forge.Stack(0) }},
		{name: "arg/max_empty_axis", op: "max", want: []string{"[0 3]"},
			fn: func(e badEnv) { e.f32(0, 3).Max(0) }},
		{name: "arg/item_empty", op: "item", want: []string{"[0]"},
			fn: func(e badEnv) { e.f32(0).Item() }},
		{name: "arg/rope_negative_position", op: "rope", want: []string{"-1"},
			fn: func(e badEnv) { forge.RoPE(e.f32(2, 4), -1) }},

		// Autograd misuse.
		{name: "grad/backward_non_scalar", op: "backward", want: []string{"[3 2]"},
			fn: func(e badEnv) { e.leaf(2, 3).Permute(1, 0).Backward() }},
		{name: "grad/backward_no_grad", op: "backward", want: []string{"[2 3]"},
			fn: func(e badEnv) { e.f32(2, 3).Backward() }},
		{name: "grad/backward_two_upstream", op: "backward",
			fn: func(e badEnv) { e.leaf(1).Reshape().Backward(e.scalar(), e.scalar()) }},
		{name: "grad/backward_twice", op: "backward", want: []string{"reshape"},
			fn: func(e badEnv) {
				y := e.leaf(1).Reshape()
				y.Backward()
				y.Backward()
			}},
		{name: "grad/requires_grad_int", op: "requires_grad", want: []string{"int32", "[2 3]"},
			fn: func(e badEnv) { e.i32(make([]int32, 6), 2, 3).RequiresGrad() }},
		{name: "grad/requires_grad_non_leaf", op: "requires_grad", want: []string{"[3 2]", "permute"},
			fn: func(e badEnv) { e.leaf(2, 3).Permute(1, 0).RequiresGrad() }},
		{name: "grad/clear_flag_non_leaf", op: "requires_grad", want: []string{"[3 2]"},
			fn: func(e badEnv) { e.leaf(2, 3).Permute(1, 0).SetRequiresGrad(false) }},
	}
}

// BadInput checks that every misuse in the table panics with a *forge.Error
// whose message starts "forge: <op>: " and names the shapes, that forge.Try
// returns that error, and that the library keeps working after a caught
// panic.
func BadInput(t *testing.T, dev *forge.Device) {
	other, err := propAliasDevice(dev)
	if err != nil {
		t.Errorf("no second device for the device-mismatch cases: %v", err)
	}
	env := badEnv{dev: dev, other: other}
	f64 := forge.Try(func() { env.f64(2).Float64s() }) == nil
	for _, c := range badCases() {
		t.Run(c.name, func(t *testing.T) {
			if c.f64 && !f64 {
				t.Skipf("device %s holds no float64 tensors", dev.Name())
			}
			if c.device {
				if other == nil {
					t.Fatalf("no second device")
				}
				c.want = append(c.want, dev.Name(), other.Name())
			}
			badCheck(t, env, c)
		})
	}
	t.Run("copy_from/overlap", func(t *testing.T) { badCopyOverlap(t, env) })
	t.Run("try/success_is_nil", func(t *testing.T) { badTrySuccess(t, env) })
	t.Run("try/foreign_panics", badTryForeign)
	t.Run("try/grad_mode_restored", func(t *testing.T) { badGradModeRestored(t, env) })
	t.Run("try/phase_restored", func(t *testing.T) { badPhaseRestored(t, env) })
}

// badRecover runs fn and returns what it panicked with (nil if it did not).
func badRecover(fn func()) (r any, panicked bool) {
	defer func() {
		if r = recover(); r != nil {
			panicked = true
		}
	}()
	fn()
	return nil, false
}

func badCheck(t *testing.T, env badEnv, c badCase) {
	r, panicked := badRecover(func() { c.fn(env) })
	if !panicked {
		if c.mayWork {
			return
		}
		t.Fatalf("did not panic; want a *forge.Error starting %q", "forge: "+c.op+": ")
	}
	if e, ok := r.(error); ok {
		var nie backend.ErrNotImplemented
		if errors.As(e, &nie) {
			t.Fatalf("could not check: %v (validation must happen before any kernel runs, or the setup needs it)", nie)
		}
	}
	fe, ok := r.(*forge.Error)
	if !ok {
		t.Fatalf("panicked with %T %v; want a *forge.Error starting %q", r, r, "forge: "+c.op+": ")
	}
	msg := fe.Error()
	t.Logf("%s", msg)
	if prefix := "forge: " + c.op + ": "; !strings.HasPrefix(msg, prefix) {
		t.Errorf("message %q does not start with %q", msg, prefix)
	}
	if fe.Op != c.op {
		t.Errorf("Error.Op = %q, want %q", fe.Op, c.op)
	}
	if c.exact != "" && msg != c.exact {
		t.Errorf("message %q, want %q", msg, c.exact)
	}
	for _, w := range c.want {
		if !strings.Contains(fe.Msg, w) {
			t.Errorf("message %q does not name %s", msg, w)
		}
	}

	// Try returns exactly the panic value …
	if err := forge.Try(func() { panic(fe) }); err != error(fe) {
		t.Errorf("Try returned %v (%T), want the *forge.Error it caught", err, err)
	}
	// … and the same error when the op itself runs under it.
	err := forge.Try(func() { c.fn(env) })
	var got *forge.Error
	if !errors.As(err, &got) {
		t.Fatalf("Try returned %v (%T), want a *forge.Error", err, err)
	}
	if got.Error() != msg {
		t.Errorf("Try returned %q, the panic was %q", got.Error(), msg)
	}
}

// badCopyOverlap: x.CopyFrom(x.T()) reads memory it writes. It must either
// refuse with a *forge.Error or give the transpose; a silently scrambled
// result is the bug.
func badCopyOverlap(t *testing.T, env badEnv) {
	x := forge.FromSlice([]float32{1, 2, 3, 4}, 2, 2).To(env.dev)
	err := forge.Try(func() { x.CopyFrom(x.T()) })
	var fe *forge.Error
	switch {
	case err == nil:
		if got := x.Float64s(); fmt.Sprint(got) != fmt.Sprint([]float64{1, 3, 2, 4}) {
			t.Errorf("x.CopyFrom(x.T()) of [[1 2] [3 4]] gave %v, want [1 3 2 4] or a *forge.Error", got)
		}
	case !errors.As(err, &fe) || fe.Op != "copy_from":
		t.Errorf("x.CopyFrom(x.T()) = %v, want a *forge.Error of copy_from", err)
	}
}

// badTrySuccess: Try of a call that does not panic returns nil.
func badTrySuccess(t *testing.T, env badEnv) {
	if err := forge.Try(func() {}); err != nil {
		t.Errorf("Try(empty) = %v", err)
	}
	var y *forge.Tensor
	if err := forge.Try(func() { y = env.f32(2, 3).Permute(1, 0).Reshape(6) }); err != nil {
		t.Errorf("Try(Permute, Reshape) = %v", err)
	} else if got := y.Shape(); len(got) != 1 || got[0] != 6 {
		t.Errorf("Try ran the op wrong: shape %v", got)
	}
	if err := forge.Try(func() { env.f32(2, 3).Add(env.f32(3)).Sum().Item() }); err != nil {
		t.Errorf("Try(Add, Sum, Item) = %v", err)
	}
}

// badTryForeign: panics that are not *forge.Error come back as errors too,
// carrying the value (and wrapping it when it is an error).
func badTryForeign(t *testing.T) {
	var nilTensor *forge.Tensor
	err := forge.Try(func() { nilTensor.Shape() })
	var fe *forge.Error
	var re runtime.Error
	switch {
	case err == nil:
		t.Errorf("Try(nil pointer) returned nil")
	case errors.As(err, &fe):
		t.Errorf("Try(nil pointer) returned a *forge.Error: %v", err)
	case !errors.As(err, &re):
		t.Errorf("Try(nil pointer) = %v; want it to wrap the runtime.Error", err)
	case !strings.Contains(err.Error(), "nil pointer"):
		t.Errorf("Try(nil pointer) = %q; want the runtime's message", err)
	}

	err = forge.Try(func() { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "boom") || errors.As(err, &fe) {
		t.Errorf("Try(panic(\"boom\")) = %v", err)
	}

	sentinel := errors.New("sentinel")
	err = forge.Try(func() { panic(fmt.Errorf("wrapped: %w", sentinel)) })
	if !errors.Is(err, sentinel) {
		t.Errorf("Try(panic(error)) = %v; want it to wrap the error", err)
	}

	err = forge.Try(func() { panic(nil) })
	if err == nil {
		t.Errorf("Try(panic(nil)) returned nil")
	}

	// An unimplemented kernel is an error the caller can recognise.
	err = forge.Try(func() { panic(backend.ErrNotImplemented{Backend: "x", Kernel: "K"}) })
	var nie backend.ErrNotImplemented
	if !errors.As(err, &nie) || nie.Kernel != "K" {
		t.Errorf("Try(ErrNotImplemented) = %v; want it to wrap backend.ErrNotImplemented", err)
	}
}

// badGradModeRestored: a panic inside NoGrad (nested or not), caught by
// Try, leaves gradient recording on, and ops record graphs again.
func badGradModeRestored(t *testing.T, env badEnv) {
	if !forge.GradEnabled() {
		t.Fatalf("GradEnabled() is false before the test")
	}
	bad := func() { env.f32(2, 3).Add(env.f32(4, 3)) }
	if err := forge.Try(func() { forge.NoGrad(bad) }); err == nil {
		t.Fatalf("bad Add inside NoGrad did not fail")
	}
	if !forge.GradEnabled() {
		t.Fatalf("GradEnabled() is false after a panic inside NoGrad caught by Try")
	}
	if err := forge.Try(func() { forge.NoGrad(func() { forge.NoGrad(func() { forge.NoGrad(bad) }) }) }); err == nil {
		t.Fatalf("bad Add inside nested NoGrad did not fail")
	}
	if !forge.GradEnabled() {
		t.Fatalf("GradEnabled() is false after a panic inside nested NoGrad caught by Try")
	}
	// A panic during Backward (which turns recording off while it runs).
	y := env.leaf(1).Reshape()
	y.Backward()
	if err := forge.Try(func() { y.Backward() }); err == nil {
		t.Fatalf("second Backward through a released graph did not fail")
	}
	if !forge.GradEnabled() {
		t.Fatalf("GradEnabled() is false after a panic inside Backward caught by Try")
	}
	// The library still records graphs and differentiates.
	x := env.leaf(2, 3)
	z := x.Permute(1, 0)
	if z.IsLeaf() || !z.RequiresGradFlag() {
		t.Fatalf("after the caught panics, Permute of a leaf that requires a gradient recorded no graph")
	}
	z.Reshape(6).Index(0, 4).Backward()
	g := x.Grad()
	if g == nil {
		t.Fatalf("after the caught panics, Backward gave no gradient")
	}
	want := []float64{0, 0, 1, 0, 0, 0} // z[2][0] = x[0][2]
	if got := g.Float64s(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after the caught panics, gradient %v, want %v", got, want)
	}
}

// badPhaseRestored: a panic inside WithPhase or Backward leaves the kernel
// phase at forward.
func badPhaseRestored(t *testing.T, env badEnv) {
	if p := forge.CurrentPhase(); p != forge.PhaseForward {
		t.Fatalf("phase %v before the test", p)
	}
	_ = forge.Try(func() {
		forge.WithPhase(forge.PhaseOptimizer, func() { env.f32(2).Add(env.f32(3)) })
	})
	if p := forge.CurrentPhase(); p != forge.PhaseForward {
		t.Errorf("phase %v after a panic inside WithPhase, want forward", p)
	}
	y := env.leaf(1).Reshape()
	y.Backward()
	_ = forge.Try(func() { y.Backward() })
	if p := forge.CurrentPhase(); p != forge.PhaseForward {
		t.Errorf("phase %v after a panic inside Backward, want forward", p)
	}
}
