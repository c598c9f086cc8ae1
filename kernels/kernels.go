// Package kernels holds the Metal Shading Language (MSL 3.1; MSL 4.0 for
// matmul2d.metal) sources of Forge's Metal backend and the rule that names
// their kernel functions.
//
// The .metal files are embedded in the binary: the Metal driver compiles
// them at run time (newLibraryWithSource) and the emulation driver
// (metal/emu) compiles the same text with clang on other systems, so the
// sources here are the single definition of every kernel.
//
// Every file is compiled as a library of its own and documents its
// parameter block and function constants.
//
// The prelude. Sources prepends the text of forge_half.h and forge_ops.h
// to every file, each under a `#line 1 "<header>"` directive, then
// `#line 1 "<file>"`, so the text the drivers compile is self-contained (no
// #include: the Metal driver compiles each entry alone) and compiler
// messages name the file and its own line numbers (a message about the
// prelude names the header and its line). forge_ops.h is generated (go
// generate ./kernels/, by internal/genops) from forge/backend/backend.go:
// the op numbers of backend.UnaryOp, BinaryOp and ReduceOp as U_NEG,
// B_ADD, R_SUM, …, which unary.metal, binary.metal and reduce.metal switch
// on. forge_half.h holds the storage-type conversions every 16-bit kernel
// shares:
//
//	forge_widen(x)        half / bfloat / float → float, exact
//	forge_narrow<T>(x)    float → T (float, half, bfloat), rounded once to
//	                      nearest even: half(x) for half; forge_bf16_bits for
//	                      bfloat (NaN stays NaN: sign and top payload bits
//	                      kept, quiet bit set), as package forge/half rounds
//	forge_bf16_bits(x)    float → bfloat16 bits (the rounding above)
//	forge_bf16_float(b)   bfloat16 bits → float, exact
//
// copy.metal alone narrows and widens float16 NaNs on the bits (payloads
// kept whatever the hardware conversion does; copy_f16_bits there). A
// .metal file read on its own (not through Sources) lacks the prelude.
//
// The kernels:
//
//	fill.metal         fill_x32                  Backend.Fill (float32/int32 bits)
//	                   fill_x16                  Backend.Fill (float16/bfloat16 bits)
//	copy.metal         copy_x32                  Backend.Copy (float32 ↔ int32)
//	                   copy_cvt                  Backend.Copy with a float16/bfloat16 side
//	unary.metal        unary_f32                 Backend.Unary (op = constant 0) …
//	                   unary_f16 unary_bf16      … on float16 / bfloat16 (float32 math)
//	                   unary_grad_f32            Backend.UnaryGrad …
//	                   unary_grad_f16 unary_grad_bf16
//	binary.metal       binary_f32                Backend.Binary (op = constant 0) …
//	                   binary_f16 binary_bf16    … on float16 / bfloat16 (float32 math)
//	                   where_x32 where_x16       Backend.Where (32/16-bit data) …
//	                   where_x32_c16 where_x16_c16 … with a 16-bit cond
//	reduce.metal       reduce_f32                Backend.Reduce (op = constant 0)
//	                   reduce_f16_f32 reduce_bf16_f32 16-bit src, float32 values / int32 indices
//	                   reduce_f16 reduce_bf16    16-bit src and dst (float32 math, rounded once)
//	softmax.metal      softmax_f32               Backend.Softmax
//	                   softmax_f16 softmax_bf16  … on float16 / bfloat16 (float32 math)
//	                   softmax_backward_f32      Backend.SoftmaxBackward
//	                   softmax_backward_f16 softmax_backward_bf16
//	matmul.metal       matmul_f32                Backend.MatMul, simdgroup_matrix tiles
//	                   matmul_f16_f32 matmul_f16 float16 operands (half fragments), float32
//	                                             accumulators, float32 or float16 dst
//	                   matmul_bf16_f32 matmul_bf16 the same for bfloat16
//	                   matmul_f32_64x32x32       the tile table, for products of whole tiles:
//	                   matmul_f32_32x64x16       float32 64×32×32 (nn, tn), 32×64×16 (nt, tt);
//	                   matmul_f16_f32_64x32x32   16-bit 64×32×32 (nt, tt), 64×64×16 (nn, tn):
//	                   matmul_f16_f32_64x64x16   the tiles are BM×BN×BK, the kernels above
//	                   matmul_f16_64x32x32       (32×32×16) the edge path
//	                   matmul_f16_64x64x16 matmul_bf16_f32_64x32x32 matmul_bf16_f32_64x64x16
//	                   matmul_bf16_64x32x32 matmul_bf16_64x64x16
//	                   matmul_splitk_f32         partial products over K chunks …
//	                   matmul_splitk_f16 matmul_splitk_bf16 (float32 partials)
//	                   matmul_reduce_f32         … added in a fixed order (split-K)
//	                   matmul_reduce_f16 matmul_reduce_bf16 (rounded once to dst)
//	                   matmul_naive_f32          the reference / fallback
//	                   matmul_naive_f16_f32 matmul_naive_f16 matmul_naive_bf16_f32 matmul_naive_bf16
//	matmul2d.metal     matmul2d_f32              Backend.MatMul through Metal 4 tensor ops (MSL 4.0,
//	                                             MetalPerformancePrimitives matmul2d), where the device runs them
//	                   matmul2d_f16_f32 matmul2d_f16 float16 operands, float32 or float16 dst
//	                   matmul2d_bf16_f32 matmul2d_bf16 the same for bfloat16
//	norm.metal         rms_norm_f32              Backend.RMSNorm
//	                   rms_norm_backward_f32     Backend.RMSNormBackward (dx)
//	                   layer_norm_f32            Backend.LayerNorm
//	                   layer_norm_backward_f32   Backend.LayerNormBackward (dx)
//	                   rms_norm_f16 rms_norm_bf16 … with float16 / bfloat16 views (float32 math;
//	                   rms_norm_backward_f16 rms_norm_backward_bf16 function constants say
//	                   layer_norm_f16 layer_norm_bf16 which of x, y or dy, w and b are 16-bit)
//	                   layer_norm_backward_f16 layer_norm_backward_bf16
//	                   norm_param_grad_f32       dw/db partial column sums over row blocks …
//	                   norm_param_grad_f16 norm_param_grad_bf16 (16-bit x / dy, float32 partials)
//	                   norm_col_sum_f32          … added in block order
//	                   norm_col_sum_f16 norm_col_sum_bf16 (rounded once to dw's dtype)
//	rope.metal         rope_f32                  Backend.RoPE, RoPEStrided
//	                   rope_f16 rope_bf16        … on float16 / bfloat16 (float32 math)
//	fused.metal        swiglu_f32                Backend.SwiGLU
//	                   swiglu_f16 swiglu_bf16    … on float16 / bfloat16 (float32 math)
//	                   swiglu_backward_f32       Backend.SwiGLUBackward
//	                   swiglu_backward_f16 swiglu_backward_bf16
//	                   sum_squares_f32           Backend.SumSquares (two passes, fixed blocks)
//	                   sum_squares_f16 sum_squares_bf16 pass 1 over a 16-bit src (float32 sums)
//	                   adamw_f32                 Backend.AdamW; AdamWClipped (constant 1)
//	optim.metal        grad_clip_f32             global-norm clip coefficient on the device
//	index.metal        index_select_x32          Backend.IndexSelect
//	                   index_sort_keys           stable radix sort of the indices …
//	                   index_row_starts          … where each row's list starts …
//	                   index_add_x32             … Backend.IndexAdd in index order
//	                   gather_x32                Backend.Gather
//	                   scatter_add_x32           Backend.ScatterAdd (a thread per column)
//	                   scatter_add_sorted_x32    Backend.ScatterAdd (few columns, sorted)
//	crossentropy.metal cross_entropy_f32         Backend.CrossEntropy
//	                   cross_entropy_f16 cross_entropy_bf16 16-bit logits (float32 loss, lse)
//	                   cross_entropy_backward_f32 Backend.CrossEntropyBackward
//	                   cross_entropy_backward_f16 cross_entropy_backward_bf16 (dlogits 16-bit)
//	attention.metal    attention_fwd_dD_f32      Backend.Attention, D = 8, 16, …, 128
//	                   attention_fwd_dD_f16 attention_fwd_dD_bf16 16-bit data (float32 math),
//	                                             D = 32, 64, 96, 128 (each serving the D below it)
//	                   attention_bwd_delta_f32   rowsum(dO∘O) for the backward …
//	                   attention_bwd_delta_f16 attention_bwd_delta_bf16
//	                   attention_bwd_dq_dD_f32   … dQ …
//	                   attention_bwd_dq_dD_f16 attention_bwd_dq_dD_bf16
//	                   attention_bwd_dk_dD_f32   … dK (no atomics) …
//	                   attention_bwd_dk_dD_f16 attention_bwd_dk_dD_bf16
//	                   attention_bwd_dv_dD_f32   … dV (no atomics)
//	                   attention_bwd_dv_dD_f16 attention_bwd_dv_dD_bf16
//	                   attention_naive_*_f32     the reference kernels for other D
//	                   attention_naive_*_f16 attention_naive_*_bf16 (float32 scratch rows)
//
// The Go side that launches them is package metal (ops_*.go).
package kernels

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

//go:generate go run ./internal/genops -src ../forge/backend/backend.go -out forge_ops.h

//go:embed *.metal forge_half.h forge_ops.h
var files embed.FS

// preludeFiles are the headers Sources prepends to every kernel file, in
// order.
var preludeFiles = []string{"forge_half.h", "forge_ops.h"}

// Sources returns every embedded kernel file: file name (e.g.
// "binary.metal") → MSL text, the prelude (forge_half.h, forge_ops.h)
// first, then `#line 1 "<file>"` and the file. The map is a fresh copy on
// every call.
func Sources() map[string]string {
	names, err := fs.Glob(files, "*.metal")
	if err != nil {
		panic(err) // the pattern is constant and valid
	}
	p := prelude()
	out := make(map[string]string, len(names))
	for _, n := range names {
		out[n] = withPrelude(p, n, readEmbedded(n))
	}
	return out
}

// prelude is the text of the prelude files, each under its own name from
// line 1.
func prelude() string {
	var b strings.Builder
	for _, n := range preludeFiles {
		fmt.Fprintf(&b, "#line 1 %q\n", n)
		b.WriteString(readEmbedded(n))
		if !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

func readEmbedded(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("kernels: reading embedded %s: %v", name, err))
	}
	return string(b)
}

// withPrelude is the text compiled for file name: the prelude (the text
// prelude returns), then src under name from line 1.
func withPrelude(prelude, name, src string) string {
	var b strings.Builder
	b.Grow(len(prelude) + len(src) + len(name) + 16)
	b.WriteString(prelude)
	fmt.Fprintf(&b, "#line 1 %q\n", name)
	b.WriteString(src)
	return b.String()
}

// Files returns the embedded file names in sorted order.
func Files() []string {
	src := Sources()
	names := make([]string, 0, len(src))
	for n := range src {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Name builds a kernel function name from its parts: each part is
// lower_snake_case ([a-z0-9] words joined by single underscores) and the
// parts are joined by "_". Name("binary", "f32") == "binary_f32". The Go
// side and the [[host_name]]s / function names in the .metal files follow
// this one rule. Name panics on an empty list or a part that is not
// lower_snake_case, so a typo cannot silently name a missing kernel.
func Name(parts ...string) string {
	if len(parts) == 0 {
		panic("kernels.Name: no parts")
	}
	for _, p := range parts {
		if !isLowerSnake(p) {
			panic(fmt.Sprintf("kernels.Name: part %q of %q is not lower_snake_case", p, parts))
		}
	}
	return strings.Join(parts, "_")
}

func isLowerSnake(s string) bool {
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '_':
			if s[i-1] == '_' {
				return false
			}
		default:
			return false
		}
	}
	return true
}
