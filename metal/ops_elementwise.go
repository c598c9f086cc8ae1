package metal

// Fill, Copy, Unary, UnaryGrad, Binary and Where (kernels/fill.metal,
// copy.metal, unary.metal, binary.metal). Each coalesces its views
// (ops_layout.go), passes shape and strides in a constant block, and picks
// the flat specialisation (one run: element i at i·stride) when one
// dimension is left.

import (
	"fmt"
	"math"

	"github.com/forgeml/forge/forge/backend"
)

// fillParams mirrors FillParams in kernels/fill.metal.
type fillParams struct {
	Value   uint32
	N       uint32
	NDim    uint32
	Shape   [maxDims]uint32
	Strides [maxDims]int32
}

// Fill sets every element of dst (float32 or int32, possibly strided) to v.
func (b *Backend) Fill(dst backend.View, v float64) {
	checkKernelDType(kFill, f32OrI32, dst)
	n := dst.Numel()
	if n == 0 {
		return
	}
	checkCount(kFill, n)
	var bits uint32
	if dst.DType() == backend.Int32 {
		bits = uint32(int32(v))
	} else {
		bits = math.Float32bits(float32(v))
	}
	coalesce(dst).split(maxDims, func(l layout) {
		p := fillParams{Value: bits, N: uint32(l.numel()), NDim: uint32(len(l.shape))}
		l.dimsArgs(kFill, &p.Shape, &p.Strides)
		key := pkey(kFill, cBool(0, len(l.shape) == 1))
		groups, threads := b.ewGrid(key, l.numel())
		b.run(kFill, key, groups, threads, b.arg(l.view(dst.Buf, 0)), bytesArg(p))
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

// Copy copies src into dst elementwise (src may be strided or broadcast,
// dst strided), converting between float32 and int32.
func (b *Backend) Copy(dst, src backend.View) {
	checkKernelDType(kCopy, f32OrI32, dst, src)
	n := dst.Numel()
	if n == 0 {
		return
	}
	checkCount(kCopy, n)
	srcInt, dstInt := src.DType() == backend.Int32, dst.DType() == backend.Int32
	coalesce(dst, src).split(maxDims, func(l layout) {
		p := copyParams{N: uint32(l.numel()), NDim: uint32(len(l.shape))}
		l.dimsArgs(kCopy, &p.Shape, &p.DstStrides, &p.SrcStrides)
		key := pkey(kCopy, cBool(0, len(l.shape) == 1), cBool(1, srcInt), cBool(2, dstInt))
		groups, threads := b.ewGrid(key, l.numel())
		b.run(kCopy, key, groups, threads, b.arg(l.view(dst.Buf, 0)), b.arg(l.view(src.Buf, 1)), bytesArg(p))
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
	if op > backend.Sign {
		panic(fmt.Sprintf("metal: %s: unknown op %v", kernel, op))
	}
}

// Unary computes dst = op(src) in float32; src is broadcast to dst's shape
// and may be dst itself.
func (b *Backend) Unary(op backend.UnaryOp, s backend.Scalars, dst, src backend.View) {
	checkUnaryOp(kUnary, op)
	checkKernelDType(kUnary, onlyF32, dst, src)
	n := dst.Numel()
	if n == 0 {
		return
	}
	checkCount(kUnary, n)
	coalesce(dst, src).split(maxDims, func(l layout) {
		p := unaryParams{A: float32(s.A), B: float32(s.B), N: uint32(l.numel()), NDim: uint32(len(l.shape))}
		l.dimsArgs(kUnary, &p.Shape, &p.Strides[0], &p.Strides[1])
		key := pkey(kUnary, cUint(0, uint32(op)), cBool(1, len(l.shape) == 1))
		groups, threads := b.ewGrid(key, l.numel())
		b.run(kUnary+"."+op.String(), key, groups, threads,
			b.arg(l.view(dst.Buf, 0)), b.arg(l.view(src.Buf, 1)), bytesArg(p))
	})
}

// UnaryGrad computes dx = g·op'(x) in float32; y = op(x) is read where
// given (a y with a nil Buf is recomputed from x).
func (b *Backend) UnaryGrad(op backend.UnaryOp, s backend.Scalars, dx, x, y, g backend.View) {
	checkUnaryOp(kUnaryGrad, op)
	checkKernelDType(kUnaryGrad, onlyF32, dx, x, y, g)
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
		l.dimsArgs(kUnaryGrad, &p.Shape, &p.Strides[0], &p.Strides[1], &p.Strides[2], &p.Strides[3])
		key := pkey(kUnaryGrad, cUint(0, uint32(op)), cBool(1, len(l.shape) == 1), cBool(2, haveY))
		groups, threads := b.ewGrid(key, l.numel())
		b.run(kUnaryGrad+"."+op.String(), key, groups, threads,
			b.arg(l.view(dx.Buf, 0)), b.arg(l.view(x.Buf, 1)), b.arg(l.view(y.Buf, 2)), b.arg(l.view(g.Buf, 3)),
			bytesArg(p))
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
// Comparisons write 1 or 0.
func (b *Backend) Binary(op backend.BinaryOp, dst, a, bv backend.View) {
	if op > backend.Ge {
		panic(fmt.Sprintf("metal: %s: unknown op %v", kBinary, op))
	}
	checkKernelDType(kBinary, onlyF32, dst, a, bv)
	n := dst.Numel()
	if n == 0 {
		return
	}
	checkCount(kBinary, n)
	coalesce(dst, a, bv).split(maxDims, func(l layout) {
		p := binaryParams{N: uint32(l.numel()), NDim: uint32(len(l.shape))}
		l.dimsArgs(kBinary, &p.Shape, &p.Strides[0], &p.Strides[1], &p.Strides[2])
		key := pkey(kBinary, cUint(0, uint32(op)), cBool(1, len(l.shape) == 1))
		groups, threads := b.ewGrid(key, l.numel())
		b.run(kBinary+"."+op.String(), key, groups, threads,
			b.arg(l.view(dst.Buf, 0)), b.arg(l.view(a.Buf, 1)), b.arg(l.view(bv.Buf, 2)), bytesArg(p))
	})
}

// Where computes dst = cond ≠ 0 ? a : b with broadcast views: dst, a and b
// float32 or int32 (one dtype), cond float32 or int32.
func (b *Backend) Where(dst, cond, a, bv backend.View) {
	checkKernelDType(kWhere, f32OrI32, dst, cond, a, bv)
	if dt := dst.DType(); a.DType() != dt || bv.DType() != dt {
		panic(fmt.Sprintf("metal: %s: mixed dtypes %v, %v and %v", kWhere, dt, a.DType(), bv.DType()))
	}
	n := dst.Numel()
	if n == 0 {
		return
	}
	checkCount(kWhere, n)
	condInt := cond.DType() == backend.Int32
	coalesce(dst, cond, a, bv).split(maxDims, func(l layout) {
		p := binaryParams{N: uint32(l.numel()), NDim: uint32(len(l.shape))}
		l.dimsArgs(kWhere, &p.Shape, &p.Strides[0], &p.Strides[1], &p.Strides[2], &p.Strides[3])
		// Where's function constants are 1 (flat) and 2 (cond int).
		key := pkey(kWhere, cBool(1, len(l.shape) == 1), cBool(2, condInt))
		groups, threads := b.ewGrid(key, l.numel())
		b.run(kWhere, key, groups, threads, b.arg(l.view(dst.Buf, 0)), b.arg(l.view(cond.Buf, 1)),
			b.arg(l.view(a.Buf, 2)), b.arg(l.view(bv.Buf, 3)), bytesArg(p))
	})
}
