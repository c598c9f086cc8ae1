package metal

// Fill, Copy, Unary, UnaryGrad, Binary and Where (kernels/fill.metal,
// copy.metal, unary.metal, binary.metal). Each coalesces its views
// (ops_layout.go), passes shape and strides in a constant block, and picks
// the flat specialisation (one run: element i at i·stride) when one
// dimension is left.
//
// float16 and bfloat16 (mixed-precision storage): Fill and Copy store and
// convert them bit for bit as package forge/half and the CPU backend do;
// Unary, UnaryGrad and Binary load them widened, compute in float32 and
// round once on store (kernels unary_f16, binary_bf16, …, by dtype); Where
// moves their bits.
//
// Copy between 32-bit dtypes, Binary, Unary and UnaryGrad on contiguous,
// aligned operands (a broadcast scalar allowed) move 4 elements per thread
// step with vector loads and stores (ewVec4); FORGE_METAL_ELEMENTWISE=scalar turns that off
// (tests compare the two paths: the same bits).

import (
	"fmt"
	"math"
	"os"
	"sync/atomic"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/half"
	"github.com/forgeml/forge/kernels"
)

// noVec4 keeps Copy (32-bit), Binary, Unary and UnaryGrad on their scalar
// loops: FORGE_METAL_ELEMENTWISE=scalar.
var noVec4 atomic.Bool

func init() {
	if os.Getenv("FORGE_METAL_ELEMENTWISE") == "scalar" {
		noVec4.Store(true)
	}
}

var (
	kFill       = kernels.Name("fill", "x32")
	kFill16     = kernels.Name("fill", "x16")
	kCopy       = kernels.Name("copy", "x32")
	kCopyCvt    = kernels.Name("copy", "cvt")
	kWhere      = kernels.Name("where", "x32")
	kWhere16    = kernels.Name("where", "x16")
	kWhereC16   = kernels.Name("where", "x32", "c16")
	kWhere16C16 = kernels.Name("where", "x16", "c16")

	kUnaryBy     = namesByDType("unary")
	kUnaryGradBy = namesByDType("unary", "grad")
	kBinaryBy    = namesByDType("binary")

	// The ops' names in panics: their float32 kernels.
	kUnary     = kUnaryBy[backend.Float32]
	kUnaryGrad = kUnaryGradBy[backend.Float32]
	kBinary    = kBinaryBy[backend.Float32]

	// Dispatch labels by dtype and op: "unary_f16.exp", ….
	unaryLabels     = opLabels(kUnaryBy, backend.NumUnaryOps)
	unaryGradLabels = opLabels(kUnaryGradBy, backend.NumUnaryOps)
	binaryLabels    = opLabels(kBinaryBy, backend.NumBinaryOps)
)

// fillParams mirrors FillParams in kernels/fill.metal.
type fillParams struct {
	Value   uint32
	N       uint32
	NDim    uint32
	Shape   [maxDims]uint32
	Strides [maxDims]int32
}

// Fill sets every element of dst (float32, int32, float16 or bfloat16,
// possibly strided) to v. A 16-bit dst gets v rounded once, from float64,
// to nearest even (package forge/half, as the CPU backend does).
func (b *Backend) Fill(dst backend.View, v float64) {
	checkKernelDType(kFill, storeTypes, dst)
	n := dst.Numel()
	if n == 0 {
		return
	}
	checkCount(kFill, n)
	var bits uint32
	kernel := kFill
	switch dst.DType() {
	case backend.Int32:
		bits = uint32(int32(v))
	case backend.Float16:
		bits, kernel = uint32(half.Float16BitsFrom64(v)), kFill16
	case backend.BFloat16:
		bits, kernel = uint32(half.BFloat16BitsFrom64(v)), kFill16
	default:
		bits = math.Float32bits(float32(v))
	}
	coalesce(dst).split(maxDims, func(l layout) {
		p := fillParams{Value: bits, N: uint32(l.numel()), NDim: uint32(len(l.shape))}
		l.dimsArgs(kernel, &p.Shape, &p.Strides)
		b.runEW(kernel, pkey(kernel, cBool(0, len(l.shape) == 1)), l.numel(), b.arg(l.view(dst.Buf, 0)), bytesArg(p))
	})
}

// copyParams mirrors CopyParams in kernels/copy.metal.
type copyParams struct {
	N          uint32
	NDim       uint32
	Shape      [maxDims]uint32
	DstStrides [maxDims]int32
	SrcStrides [maxDims]int32
}

// copyType is a dtype's code in copy_cvt (COPY_F32 … COPY_BF16 in
// kernels/copy.metal).
func copyType(dt backend.DType) uint32 {
	switch dt {
	case backend.Int32:
		return 1
	case backend.Float16:
		return 2
	case backend.BFloat16:
		return 3
	}
	return 0
}

// Copy copies src into dst elementwise (src may be strided or broadcast,
// dst strided), converting between any two of float32, int32, float16 and
// bfloat16 as the CPU backend does: widening is exact, narrowing rounds
// the exact value once to nearest even (int32 → 16-bit too), float → int32
// truncates toward zero.
func (b *Backend) Copy(dst, src backend.View) {
	checkKernelDType(kCopy, storeTypes, dst, src)
	n := dst.Numel()
	if n == 0 {
		return
	}
	checkCount(kCopy, n)
	sdt, ddt := src.DType(), dst.DType()
	srcInt, dstInt := sdt == backend.Int32, ddt == backend.Int32
	kernel := kCopy
	if sdt.IsHalf() || ddt.IsHalf() {
		kernel = kCopyCvt
	}
	coalesce(dst, src).split(maxDims, func(l layout) {
		p := copyParams{N: uint32(l.numel()), NDim: uint32(len(l.shape))}
		l.dimsArgs(kernel, &p.Shape, &p.DstStrides, &p.SrcStrides)
		args := [2]kernelArg{b.arg(l.view(dst.Buf, 0)), b.arg(l.view(src.Buf, 1))}
		vec := kernel == kCopy && ewVec4(l, 4, args[:]) // copy_cvt has no vector loop
		key := pkey(kCopy, cBool(0, len(l.shape) == 1), cBool(1, srcInt), cBool(2, dstInt), cBool(5, vec))
		if kernel == kCopyCvt {
			key = pkey(kCopyCvt, cBool(0, len(l.shape) == 1), cUint(3, copyType(sdt)), cUint(4, copyType(ddt)))
		}
		b.runEW(kernel, key, ewVec4Threads(l.numel(), vec), args[0], args[1], bytesArg(p))
	})
}

// unaryParams mirrors UnaryParams in kernels/unary.metal.
type unaryParams struct {
	A, B    float32
	N       uint32
	NDim    uint32
	Shape   [maxDims]uint32
	Strides [4][maxDims]int32
}

func checkUnaryOp(kernel string, op backend.UnaryOp) {
	if op >= backend.NumUnaryOps {
		panic(fmt.Sprintf("metal: %s: unknown op %v", kernel, op))
	}
}

// Unary computes dst = op(src) in float32; src is broadcast to dst's shape
// and may be dst itself. float16 and bfloat16 views (both of one dtype)
// are widened on load and rounded once on store.
func (b *Backend) Unary(op backend.UnaryOp, s backend.Scalars, dst, src backend.View) {
	checkUnaryOp(kUnary, op)
	dt := floatDType(kUnary, dst, src)
	kernel, label := kUnaryBy[dt], unaryLabels[dt][op]
	n := dst.Numel()
	if n == 0 {
		return
	}
	checkCount(kUnary, n)
	coalesce(dst, src).split(maxDims, func(l layout) {
		p := unaryParams{A: float32(s.A), B: float32(s.B), N: uint32(l.numel()), NDim: uint32(len(l.shape))}
		l.dimsArgs(kernel, &p.Shape, &p.Strides[0], &p.Strides[1])
		args := [2]kernelArg{b.arg(l.view(dst.Buf, 0)), b.arg(l.view(src.Buf, 1))}
		vec := ewVec4(l, dt.Size(), args[:])
		key := pkey(kernel, cUint(0, uint32(op)), cBool(1, len(l.shape) == 1), cBool(3, vec))
		b.runEW(label, key, ewVec4Threads(l.numel(), vec), args[0], args[1], bytesArg(p))
	})
}

// UnaryGrad computes dx = g·op'(x) in float32; y = op(x) is read where
// given (a y with a nil Buf is recomputed from x). float16 and bfloat16
// views (all of one dtype) are widened on load, dx rounded once on store.
func (b *Backend) UnaryGrad(op backend.UnaryOp, s backend.Scalars, dx, x, y, g backend.View) {
	checkUnaryOp(kUnaryGrad, op)
	dt := floatDType(kUnaryGrad, dx, x, y, g)
	kernel, label := kUnaryGradBy[dt], unaryGradLabels[dt][op]
	n := dx.Numel()
	if n == 0 {
		return
	}
	checkCount(kUnaryGrad, n)
	haveY := y.Buf != nil
	if !haveY {
		y = x // bound in its place, never read
	}
	coalesce(dx, x, y, g).split(maxDims, func(l layout) {
		p := unaryParams{A: float32(s.A), B: float32(s.B), N: uint32(l.numel()), NDim: uint32(len(l.shape))}
		l.dimsArgs(kernel, &p.Shape, &p.Strides[0], &p.Strides[1], &p.Strides[2], &p.Strides[3])
		args := [4]kernelArg{b.arg(l.view(dx.Buf, 0)), b.arg(l.view(x.Buf, 1)), b.arg(l.view(y.Buf, 2)), b.arg(l.view(g.Buf, 3))}
		vec := ewVec4(l, dt.Size(), args[:])
		key := pkey(kernel, cUint(0, uint32(op)), cBool(1, len(l.shape) == 1), cBool(2, haveY), cBool(3, vec))
		b.runEW(label, key, ewVec4Threads(l.numel(), vec), args[0], args[1], args[2], args[3], bytesArg(p))
	})
}

// binaryParams mirrors BinaryParams in kernels/binary.metal.
type binaryParams struct {
	N       uint32
	NDim    uint32
	Shape   [maxDims]uint32
	Strides [4][maxDims]int32
}

// Binary computes dst = a op b in float32; a and b carry broadcast strides.
// Comparisons write 1 or 0. float16 and bfloat16 views (all three of one
// dtype) are widened on load and rounded once on store.
func (b *Backend) Binary(op backend.BinaryOp, dst, a, bv backend.View) {
	if op >= backend.NumBinaryOps {
		panic(fmt.Sprintf("metal: %s: unknown op %v", kBinary, op))
	}
	dt := floatDType(kBinary, dst, a, bv)
	kernel, label := kBinaryBy[dt], binaryLabels[dt][op]
	n := dst.Numel()
	if n == 0 {
		return
	}
	checkCount(kBinary, n)
	coalesce(dst, a, bv).split(maxDims, func(l layout) {
		p := binaryParams{N: uint32(l.numel()), NDim: uint32(len(l.shape))}
		l.dimsArgs(kernel, &p.Shape, &p.Strides[0], &p.Strides[1], &p.Strides[2])
		args := [3]kernelArg{b.arg(l.view(dst.Buf, 0)), b.arg(l.view(a.Buf, 1)), b.arg(l.view(bv.Buf, 2))}
		vec := ewVec4(l, dt.Size(), args[:])
		key := pkey(kernel, cUint(0, uint32(op)), cBool(1, len(l.shape) == 1), cBool(3, vec))
		b.runEW(label, key, ewVec4Threads(l.numel(), vec), args[0], args[1], args[2], bytesArg(p))
	})
}

// ewVec4 reports whether an elementwise layout (Copy, Binary, Unary,
// UnaryGrad; args bound in layout order, the output first) takes the
// kernels' vectorised loop (copy_vec4, binary_vec4, unary_vec4): one run (after coalescing) of
// at least 4 elements, the output contiguous, every input contiguous or a
// broadcast scalar, and every contiguous view bound at a byte offset that
// is a multiple of 4 elements of size bytes (the vector loads' and
// stores' alignment).
func ewVec4(l layout, size int, args []kernelArg) bool {
	if noVec4.Load() || len(l.shape) != 1 || l.shape[0] < 4 || l.strides[0][0] != 1 {
		return false
	}
	for v, a := range args {
		st := l.strides[v][0]
		if st != 0 && st != 1 {
			return false
		}
		if st == 1 && a.drv.Offset%(4*size) != 0 {
			return false
		}
	}
	return true
}

// ewVec4Threads is the threads an elementwise call over n elements wants:
// one per element, or on the vector loop one per 4 (and the tail's).
func ewVec4Threads(n int, vec bool) int {
	if vec {
		return (n + 3) / 4
	}
	return n
}

// Where computes dst = cond ≠ 0 ? a : b with broadcast views: dst, a and b
// of one dtype, cond of any (float32, int32, float16 or bfloat16; ±0 is
// zero, NaN is not). The data moves unconverted.
func (b *Backend) Where(dst, cond, a, bv backend.View) {
	checkKernelDType(kWhere, storeTypes, dst, cond, a, bv)
	if dt := dst.DType(); a.DType() != dt || bv.DType() != dt {
		panic(fmt.Sprintf("metal: %s: mixed dtypes %v, %v and %v", kWhere, dt, a.DType(), bv.DType()))
	}
	n := dst.Numel()
	if n == 0 {
		return
	}
	checkCount(kWhere, n)
	condInt := cond.DType() == backend.Int32
	// where_x32, where_x16, where_x32_c16 or where_x16_c16: the data's and
	// the condition's word sizes.
	var kernel string
	switch d16, c16 := dst.DType().IsHalf(), cond.DType().IsHalf(); {
	case d16 && c16:
		kernel = kWhere16C16
	case d16:
		kernel = kWhere16
	case c16:
		kernel = kWhereC16
	default:
		kernel = kWhere
	}
	coalesce(dst, cond, a, bv).split(maxDims, func(l layout) {
		p := binaryParams{N: uint32(l.numel()), NDim: uint32(len(l.shape))}
		l.dimsArgs(kernel, &p.Shape, &p.Strides[0], &p.Strides[1], &p.Strides[2], &p.Strides[3])
		// Where's function constants are 1 (flat) and 2 (cond int).
		key := pkey(kernel, cBool(1, len(l.shape) == 1), cBool(2, condInt))
		b.runEW(kernel, key, l.numel(), b.arg(l.view(dst.Buf, 0)), b.arg(l.view(cond.Buf, 1)),
			b.arg(l.view(a.Buf, 2)), b.arg(l.view(bv.Buf, 3)), bytesArg(p))
	})
}
