package metal

// MatMul (kernels/matmul.metal): the simdgroup_matrix tiled kernel, or the
// naive one-thread-per-output reference.

import (
	"fmt"
	"math"
	"os"
	"sync/atomic"

	"github.com/forgeml/forge/forge/backend"
)

// Tile geometry of matmul_f32 (MM_BM, MM_BN, MM_BK, MM_THREADS in
// kernels/matmul.metal), and the threadgroup side of matmul_naive_f32.
const (
	mmBM         = 32
	mmBN         = 32
	mmBK         = 16
	mmThreads    = 128
	mmMaxBatch   = 4
	mmNaiveTile  = 16
	mmMaxZGroups = 65535 // batches per dispatch (the grid's z extent)
)

// naiveMatMul routes every product to matmul_naive_f32, the fallback:
// FORGE_METAL_MATMUL=naive sets it at start-up (to rule the tiled kernel
// in or out when a result looks wrong on a GPU); tests compare the two.
var naiveMatMul atomic.Bool

func init() {
	if os.Getenv("FORGE_METAL_MATMUL") == "naive" {
		naiveMatMul.Store(true)
	}
}

// matmulParams mirrors MatMulParams in kernels/matmul.metal.
type matmulParams struct {
	M, N, K  uint32
	ARs, ACs int32
	BRs, BCs int32
	CRs      int32
	NBatch   uint32
	BShape   [mmMaxBatch]uint32
	ABs      [mmMaxBatch]int32
	BBs      [mmMaxBatch]int32
	CBs      [mmMaxBatch]int32
}

// MatMul computes dst[b] = a[b] @ bm[b] (dst += … if accumulate) in
// float32 for every batch index. The last two dims of a and bm may have
// any strides (row-major and column-major operands are read in place);
// dst's rows are contiguous. Batch dims of a and bm broadcast to dst's
// (stride 0, or missing leading dims).
func (b *Backend) MatMul(dst, a, bm backend.View, accumulate bool) {
	checkKernelDType(kMatMul, onlyF32, dst, a, bm)
	r := len(dst.Shape)
	if r < 2 || len(a.Shape) < 2 || len(bm.Shape) < 2 {
		panic(fmt.Sprintf("metal: %s: operands need two dims: dst %v, a %v, b %v", kMatMul, dst.Shape, a.Shape, bm.Shape))
	}
	m, n := dst.Shape[r-2], dst.Shape[r-1]
	k := a.Shape[len(a.Shape)-1]
	if a.Shape[len(a.Shape)-2] != m || bm.Shape[len(bm.Shape)-2] != k || bm.Shape[len(bm.Shape)-1] != n {
		panic(fmt.Sprintf("metal: %s: shapes do not chain: dst %v, a %v, b %v", kMatMul, dst.Shape, a.Shape, bm.Shape))
	}
	if dst.Strides[r-1] != 1 && n != 1 {
		panic(fmt.Sprintf("metal: %s: dst %v has strides %v: its rows must be contiguous", kMatMul, dst.Shape, dst.Strides))
	}
	nb := 1
	for _, d := range dst.Shape[:r-2] {
		nb *= d
	}
	if m == 0 || n == 0 || nb == 0 {
		return
	}
	if k == 0 {
		if !accumulate {
			b.Fill(dst, 0)
		}
		return
	}
	// Batch dims: each operand's strides aligned to dst's batch dims (0
	// where it broadcasts), then coalesced across the three.
	rb := r - 2
	bviews := make([]backend.View, 3)
	for v, x := range []backend.View{dst, a, bm} {
		xb := len(x.Shape) - 2
		if xb > rb {
			panic(fmt.Sprintf("metal: %s: operand %v has more batch dims than dst %v", kMatMul, x.Shape, dst.Shape))
		}
		st := make([]int, rb)
		for d := 0; d < xb; d++ {
			dd := rb - xb + d
			switch {
			case x.Shape[d] == dst.Shape[dd]:
				st[dd] = x.Strides[d]
			case x.Shape[d] == 1:
				st[dd] = 0
			default:
				panic(fmt.Sprintf("metal: %s: batch dims of %v do not broadcast to dst %v", kMatMul, x.Shape, dst.Shape))
			}
		}
		bviews[v] = backend.View{Offset: x.Offset, Shape: dst.Shape[:rb], Strides: st}
	}
	bl := coalesce(bviews...)
	if nb == 1 {
		bl.shape = nil // no batch dims
		for v := range bl.strides {
			bl.strides[v] = nil
		}
	}
	p := matmulParams{M: uint32(m), N: uint32(n), K: uint32(k)}
	p.ARs, p.ACs = int32(a.Strides[len(a.Strides)-2]), int32(a.Strides[len(a.Strides)-1])
	p.BRs, p.BCs = int32(bm.Strides[len(bm.Strides)-2]), int32(bm.Strides[len(bm.Strides)-1])
	p.CRs = int32(dst.Strides[r-2])
	checkMatrixSpan(m, k, a.Strides[len(a.Strides)-2:])
	checkMatrixSpan(k, n, bm.Strides[len(bm.Strides)-2:])
	checkMatrixSpan(m, n, dst.Strides[r-2:])
	// A column-major operand (stride 1 down its rows) is staged walking
	// its rows; a dimension of size 1 says nothing.
	aTrans := k > 1 && a.Strides[len(a.Strides)-1] != 1 && (m == 1 || a.Strides[len(a.Strides)-2] == 1)
	bTrans := n > 1 && bm.Strides[len(bm.Strides)-1] != 1 && (k == 1 || bm.Strides[len(bm.Strides)-2] == 1)
	naive := naiveMatMul.Load()
	bufs := []backend.Buffer{dst.Buf, a.Buf, bm.Buf}
	b.batchSplit(bl, func(sub layout) {
		q := p
		nz := sub.numel()
		if len(sub.shape) == 0 {
			nz = 1
		}
		q.NBatch = uint32(len(sub.shape))
		for d, s := range sub.shape {
			q.BShape[d] = uint32(s)
			q.CBs[d] = int32(sub.strides[0][d])
			q.ABs[d] = int32(sub.strides[1][d])
			q.BBs[d] = int32(sub.strides[2][d])
		}
		c, av, bv := b.arg(sub.view(bufs[0], 0)), b.arg(sub.view(bufs[1], 1)), b.arg(sub.view(bufs[2], 2))
		if naive {
			key := pkey(kMatMulNaive, cBool(5, accumulate))
			groups := [3]int{(n + mmNaiveTile - 1) / mmNaiveTile, (m + mmNaiveTile - 1) / mmNaiveTile, nz}
			b.run(kMatMulNaive, key, groups, [3]int{mmNaiveTile, mmNaiveTile, 1}, c, av, bv, bytesArg(q))
			return
		}
		key := pkey(kMatMul, cBool(0, aTrans), cBool(1, bTrans), cBool(2, m%mmBM == 0),
			cBool(3, n%mmBN == 0), cBool(4, k%mmBK == 0), cBool(5, accumulate))
		groups := [3]int{(n + mmBN - 1) / mmBN, (m + mmBM - 1) / mmBM, nz}
		b.run(kMatMul+"."+layoutTag(aTrans, bTrans), key, groups, [3]int{mmThreads, 1, 1}, c, av, bv, bytesArg(q))
	})
}

// layoutTag names the operand layouts: "nn", "nt", "tn" or "tt".
func layoutTag(aTrans, bTrans bool) string {
	t := [2]string{"n", "t"}
	x, y := 0, 0
	if aTrans {
		x = 1
	}
	if bTrans {
		y = 1
	}
	return t[x] + t[y]
}

// batchSplit calls fn for sub-layouts of the batch layout l that fit one
// dispatch: at most mmMaxBatch dims and mmMaxZGroups batches.
func (b *Backend) batchSplit(l layout, fn func(sub layout)) {
	nz := 1
	for _, s := range l.shape {
		nz *= s
	}
	if len(l.shape) <= mmMaxBatch && nz <= mmMaxZGroups {
		for v, st := range l.strides {
			span := 0
			for d, s := range st {
				span += absInt(s) * (l.shape[d] - 1)
			}
			if span > math.MaxInt32 {
				panic(fmt.Sprintf("metal: %s: operand %d's batch spans %d elements, beyond int32 offsets", kMatMul, v, span))
			}
		}
		fn(l)
		return
	}
	for i := 0; i < l.shape[0]; i++ {
		sub := layout{shape: l.shape[1:], strides: make([][]int, len(l.strides)), offsets: make([]int, len(l.offsets))}
		for v := range l.strides {
			sub.strides[v] = l.strides[v][1:]
			sub.offsets[v] = l.offsets[v] + i*l.strides[v][0]
		}
		b.batchSplit(sub, fn)
	}
}

// checkMatrixSpan panics when a matrix's offsets overflow int32.
func checkMatrixSpan(rows, cols int, strides []int) {
	span := absInt(strides[0])*(rows-1) + absInt(strides[1])*(cols-1)
	if span > math.MaxInt32 {
		panic(fmt.Sprintf("metal: %s: a %d×%d operand spans %d elements, beyond int32 offsets", kMatMul, rows, cols, span))
	}
}
