package metal

// MatMul (kernels/matmul.metal): the simdgroup_matrix tiled kernel, its
// split-K form for products with few output tiles and a long K, or the
// naive one-thread-per-output reference — for float32 operands, or
// float16 / bfloat16 ones accumulated in float32 (mixed precision: see
// MatMul).
//
// # Split-K
//
// A weight gradient dW = xᵀ·dy (M, N = the layer's dims, K = B·T tokens)
// has few 32 × 32 output tiles and a very long K: the tiled kernel runs one
// threadgroup per tile, so a GPU that holds hundreds of threadgroups at
// once runs a handful, each walking all of K (the seed's measurement: the
// tn shape at K = 65536 reaches 4.7 TFLOPs where the others reach 10.6).
// Split-K cuts K into S chunks of whole MM_BK steps: matmul_splitk_f32
// writes S partial products into a float32 scratch buffer (S·M·N), and
// matmul_reduce_f32 adds them in order s = 0 … S−1 into dst — no atomics,
// the same bits for any thread schedule.
//
// The rule (splitKPlan), with G the threadgroups the device runs at once
// (mmGroupsPerCore per GPU core) and tiles = ⌈M/32⌉·⌈N/32⌉:
//
//   - split only one matrix (no batch dims: the backward folds the batch of
//     x into K) and only when tiles < G/2: a grid that already fills half
//     the device gains little occupancy for the scratch traffic and the
//     extra dispatch;
//   - S = ⌈G/tiles⌉ (the split grid then fills the device), at most
//     ⌊K/(8·MM_BK)⌋ (each partial at least 8 K-steps, 128 of K, so one
//     tile's staging, zeroing and store stay small next to its loop: MLX
//     splits at K/16 ≥ 8 too), at most mmSplitMax = 32 (bounds the scratch
//     and the reduction's reads per element), and at most (M+N)·K/(2·M·N),
//     so the partials written and read back never outweigh the operand
//     reads (it never binds on dW shapes, K ≫ M, N; it keeps square-ish
//     small products whole);
//   - no split when S < 2. The chunk is ⌈steps/S⌉ MM_BK-steps and S is
//     recomputed from it, so no split is empty.
//
// G is mmGroupsPerCore times the GPU's core count: FORGE_METAL_GPU_CORES
// when set; else the driver's (the optional driver.GPUCores — the Metal
// driver looks the device's name up in a table of Apple's chips, taking
// the fewest cores a chip ships with: an M1 Pro counts as 14 whether it has
// 14 or 16); else mmDefaultCores (16: between an M-series base chip's
// 7–10 cores and a Max's 24–40 — too low a guess only under-splits a large
// GPU, too high over-splits a small one, which costs scratch traffic but
// no correctness). FORGE_METAL_MATMUL=nosplit turns split-K off.
//
// # Tensor ops (matmul2d)
//
// kernels/matmul2d.metal computes the same products with Metal 4's tensor
// operations (MetalPerformancePrimitives' matmul2d, MSL 4.0), which run on
// the neural accelerators of Apple10-family GPUs (M5, A19 and later). The
// device's level comes from the driver (the optional driver.TensorOps):
// the Metal driver says none before macOS 26 or on a GPU outside the Metal
// 4 family, supported on Metal 4 GPUs without neural accelerators,
// accelerated on the Apple10 family (matmul2d.metal compiles when a
// product first takes it; a failure turns the variant off). The
// emulator, whose shim implements the tensor ops, counts as accelerated
// (so CI runs the variant) unless FORGE_EMU_TENSOR_OPS=0.
//
// The rule (decided per product, from values fixed at start-up or by the
// driver once): a product goes to matmul2d when
//
//   - the path allows it: FORGE_METAL_MATMUL unset (auto) needs an
//     accelerated device and 16-bit operands (float32 products stay on the
//     simdgroup kernel until the accelerators' float32 speed and precision
//     are measured: other projects send float32 there only as an opt-in
//     relaxed "TF32"), FORGE_METAL_MATMUL=matmul2d any device that runs
//     tensor ops at all and any dtype, FORGE_METAL_MATMUL=simdgroup (or
//     naive) never;
//   - it is not split (split-K keeps the simdgroup kernels: matmul2d has no
//     split form yet);
//   - both operands have the layouts matmul2d.metal takes: unit stride
//     along one axis (row- or column-major, a transposed matrix seen through
//     a view) and an outer stride no smaller than that axis's extent;
//     anything else (a non-unit inner stride, overlapping rows) runs the
//     simdgroup kernel, which reads any strides;
//   - its pipeline compiles and takes matmul2d.metal's 128-thread
//     threadgroups of 32-wide simdgroups; if not, the backend says so once
//     on stderr and never tries matmul2d again.
//
// FORGE_METAL_MATMUL takes a comma-separated list: naive, nosplit,
// simdgroup, matmul2d.

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/driver"
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

	m2BM      = 64  // dst rows per matmul2d threadgroup (M2_BM in kernels/matmul2d.metal)
	m2BN      = 32  // … dst columns (M2_BN)
	m2Threads = 128 // … threads: the op's execution_simdgroups<4>

	mmSplitMinSteps = 8  // MM_BK steps per split at least
	mmSplitMax      = 32 // partial products at most
	mmGroupsPerCore = 4  // matmul threadgroups a GPU core keeps busy (4 simdgroups each, ~6 KB)
	mmDefaultCores  = 16 // the core count assumed when the driver does not tell
)

// naiveMatMul routes every product to matmul_naive_f32, the fallback:
// FORGE_METAL_MATMUL=naive sets it at start-up (to rule the tiled kernel
// in or out when a result looks wrong on a GPU); tests compare the two.
var naiveMatMul atomic.Bool

// noSplitK turns split-K off: FORGE_METAL_MATMUL=nosplit; tests compare.
var noSplitK atomic.Bool

// envGPUCores is FORGE_METAL_GPU_CORES, the GPU's core count as the user
// states it (0: not set), ahead of the driver's.
var envGPUCores = parseGPUCores(os.Getenv("FORGE_METAL_GPU_CORES"))

// parseGPUCores reads a FORGE_METAL_GPU_CORES value: a positive count, or
// 0 for an empty value and, said on stderr, for anything else.
func parseGPUCores(s string) int {
	if strings.TrimSpace(s) == "" {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n <= 0 || n > 1<<16 {
		fmt.Fprintf(os.Stderr, "metal: FORGE_METAL_GPU_CORES=%q is not a GPU core count; ignored (set it to a positive number, e.g. 38, or unset it)\n", s)
		return 0
	}
	return n
}

// The tiled path (matmulPath): matmul2d by the device's level (auto), never
// (FORGE_METAL_MATMUL=simdgroup) or wherever the device runs tensor ops
// (FORGE_METAL_MATMUL=matmul2d). Tests set it.
const (
	pathAuto int32 = iota
	pathSimdgroup
	pathMatMul2D
)

var matmulPath atomic.Int32

func init() {
	for _, v := range strings.Split(os.Getenv("FORGE_METAL_MATMUL"), ",") {
		switch strings.TrimSpace(v) {
		case "naive":
			naiveMatMul.Store(true)
		case "nosplit":
			noSplitK.Store(true)
		case "edge":
			noMatMulTable.Store(true)
		case "simdgroup":
			matmulPath.Store(pathSimdgroup)
		case "matmul2d":
			matmulPath.Store(pathMatMul2D)
		}
	}
}

// tensorOpsLevel is how the device runs the tensor-op kernels: the
// driver's answer (the optional driver.TensorOps; the Metal driver decides
// from the GPU families once, the emulator from FORGE_EMU_TENSOR_OPS),
// none for a driver without it.
func (b *Backend) tensorOpsLevel() driver.TensorOpsLevel {
	if t, ok := b.drv.(driver.TensorOps); ok {
		return t.TensorOps()
	}
	return driver.TensorOpsNone
}

// matmul2dOn reports whether the path and the device let products with
// operands of dtype dt go to matmul2d (the layouts are checked apart:
// matmul2dLayout).
func (b *Backend) matmul2dOn(dt backend.DType) bool {
	var want driver.TensorOpsLevel
	switch matmulPath.Load() {
	case pathSimdgroup:
		return false
	case pathMatMul2D:
		want = driver.TensorOpsSupported
	default:
		if !dt.IsHalf() {
			return false
		}
		want = driver.TensorOpsAccelerated
	}
	if b.tensorOpsLevel() < want {
		return false
	}
	return b.m2Failed.Load() == nil
}

// matmul2dLayout reports whether a rows × cols operand with element (i, j)
// at i·rs + j·cs is a tensor matmul2d.metal reads: unit stride along its
// inner axis (the columns, or the rows when trans: column-major) and an
// outer stride at least the inner extent. An axis of extent 1 needs no
// stride.
func matmul2dLayout(rows, cols, rs, cs int, trans bool) bool {
	inner, outer, sIn, sOut := cols, rows, cs, rs
	if trans {
		inner, outer, sIn, sOut = rows, cols, rs, cs
	}
	return (sIn == 1 || inner == 1) && (outer == 1 || sOut >= inner)
}

// runMatMul2D launches matmul2d for one dispatch's batches (nz) and reports
// whether it did: false when its pipeline does not compile (then the
// backend says so once and turns matmul2d off).
func (b *Backend) runMatMul2D(kn matmulNames, q matmulParams, nz int, aTrans, bTrans, accumulate bool, c, av, bv kernelArg) bool {
	m, n := int(q.M), int(q.N)
	// The outer stride of a row-major operand with one row is never used;
	// give its tensor a valid one. (A column-major operand has more than one
	// column: aTrans and bTrans need it.)
	if !aTrans && m == 1 {
		q.ARs = max(q.ARs, int32(q.K))
	}
	if !bTrans && q.K == 1 {
		q.BRs = max(q.BRs, int32(n))
	}
	key := pkey(kn.tensor, cBool(0, aTrans), cBool(1, bTrans), cBool(5, accumulate))
	p, err := b.tryPipeline(key)
	if err == nil {
		if p.MaxThreads() < m2Threads || p.SIMDWidth() != 32 {
			err = fmt.Errorf("%s: threadgroups of at most %d threads, simdgroups of %d; matmul2d.metal needs %d and 32", kn.tensor, p.MaxThreads(), p.SIMDWidth(), m2Threads)
		}
	}
	if err != nil {
		if b.m2Failed.CompareAndSwap(nil, &err) {
			fmt.Fprintf(os.Stderr, "metal: matmul2d (tensor ops) is off, the simdgroup kernels run instead: %v\n", err)
		}
		return false
	}
	groups := [3]int{(n + m2BN - 1) / m2BN, (m + m2BM - 1) / m2BM, nz}
	b.runPipe(kn.tensorL[layoutIndex(aTrans, bTrans)], key, p, groups, [3]int{m2Threads, 1, 1}, c, av, bv, bytesArg(q))
	return true
}

// tryPipeline compiles (or finds) key's pipeline, returning the error
// pipelineFor would panic with.
func (b *Backend) tryPipeline(key driver.PipelineKey) (p driver.Pipeline, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return b.pipelineFor(key), nil
}

// gpuCores returns the GPU's core count as the split-K rule takes it:
// FORGE_METAL_GPU_CORES, else the driver's (driver.GPUCores), else
// mmDefaultCores.
func (b *Backend) gpuCores() int {
	if envGPUCores > 0 {
		return envGPUCores
	}
	if c, ok := b.drv.(driver.GPUCores); ok {
		if n := c.GPUCores(); n > 0 {
			return n
		}
	}
	return mmDefaultCores
}

// matmulGroups is G, the matmul threadgroups the device runs at once.
func (b *Backend) matmulGroups() int { return b.gpuCores() * mmGroupsPerCore }

// splitKPlan returns how many K chunks to split an M × N × K product of one
// matrix into (1: no split) and the chunk length (a multiple of mmBK), by
// the rule in the file's documentation.
func (b *Backend) splitKPlan(m, n, k int) (splits, chunk int) {
	if noSplitK.Load() {
		return 1, k
	}
	g := b.matmulGroups()
	tiles := ((m + mmBM - 1) / mmBM) * ((n + mmBN - 1) / mmBN)
	if 2*tiles >= g {
		return 1, k
	}
	steps := (k + mmBK - 1) / mmBK
	s := min((g+tiles-1)/tiles, steps/mmSplitMinSteps, mmSplitMax)
	if mn := 2 * m * n; mn > 0 {
		s = min(s, (m+n)*k/mn)
	}
	if s < 2 {
		return 1, k
	}
	per := (steps + s - 1) / s
	return (steps + per - 1) / per, per * mmBK
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
	KChunk   uint32 // split-K: K per partial product
	Splits   uint32 // split-K: partial products
}

// matmulNames are the kernels of one operand/dst dtype pair.
type matmulNames struct {
	tiled, naive, splitK, reduce string
	tensor                       string // matmul2d.metal's

	// Dispatch labels by operand layout (layoutIndex): "matmul_f32.tn", ….
	tiledL, splitKL, tensorL [4]string

	// The table's tile for each layout (mmTable), its kernel and label.
	table          [4]mmTile
	tableK, tableL [4]string
}

// mmTile is a tiled kernel's geometry (MMTile in kernels/matmul.metal):
// a bm × bn block of dst per threadgroup, K staged bk at a time, wm × wn
// simdgroups.
type mmTile struct{ bm, bn, bk, wm, wn int }

func (t mmTile) threads() int { return t.wm * t.wn * 32 }

// name is the tile's kernel suffix, "64x32x32".
func (t mmTile) name() string { return fmt.Sprintf("%dx%dx%d", t.bm, t.bn, t.bk) }

// fits reports whether an m × n × k product is made of whole tiles.
func (t mmTile) fits(m, n, k int) bool { return m%t.bm == 0 && n%t.bn == 0 && k%t.bk == 0 }

// mmTable is the seed project's tile table (its research notes, §5: the
// starting points it took from MLX's GEMM for Apple GPUs), by operand
// type (0 float32, 1 16-bit) and layout (nn, nt, tn, tt): float32 nt
// (the forward X·Wᵀ) 32×64×16 on 1×2 simdgroups, float32 nn 64×32×32 on
// 2×2; 16-bit nt 64×32×32, the rest 64×64×16, on 2×2. MatMul takes the
// table's tile for products of whole tiles and the 32×32×16 kernel (the
// edge path) for everything else and for split-K. The seed notes the
// table is a starting point to tune on the GPU; FORGE_METAL_MATMUL=edge
// turns it off, for comparisons (forge bench matmul).
var mmTable = [2][4]mmTile{
	{{64, 32, 32, 2, 2}, {32, 64, 16, 1, 2}, {64, 32, 32, 2, 2}, {32, 64, 16, 1, 2}},
	{{64, 64, 16, 2, 2}, {64, 32, 32, 2, 2}, {64, 64, 16, 2, 2}, {64, 32, 32, 2, 2}},
}

// noMatMulTable routes every tiled product to the edge kernel
// (FORGE_METAL_MATMUL=edge); tests compare.
var noMatMulTable atomic.Bool

// matmulByDType holds matmulKernels(in, out) for every pair MatMul takes
// (built once), indexed [in][out == in].
var matmulByDType = func() (t [backend.BFloat16 + 1][2]matmulNames) {
	for _, in := range floatTypes {
		t[in][0] = matmulKernels(in, backend.Float32)
		t[in][1] = matmulKernels(in, in)
	}
	return t
}()

// matmulKernels returns the kernels for operands of dtype in and a dst of
// dtype out (kernels/matmul.metal: matmul_<in>[_<out>], the dst's dtype
// named where it differs; the split-K partials are float32 whatever the
// operands, and the reduction rounds to dst's dtype).
func matmulKernels(in, out backend.DType) matmulNames {
	parts := []string{dtypeTag(in)}
	if out != in {
		parts = append(parts, dtypeTag(out))
	}
	kn := matmulNames{
		tiled:  kernels.Name(append([]string{"matmul"}, parts...)...),
		naive:  kernels.Name(append([]string{"matmul", "naive"}, parts...)...),
		splitK: kernels.Name("matmul", "splitk", dtypeTag(in)),
		reduce: kernels.Name("matmul", "reduce", dtypeTag(out)),
		tensor: kernels.Name(append([]string{"matmul2d"}, parts...)...),
	}
	class := 0
	if in.IsHalf() {
		class = 1
	}
	for i, tag := range layoutTags {
		kn.tiledL[i], kn.splitKL[i], kn.tensorL[i] = kn.tiled+"."+tag, kn.splitK+"."+tag, kn.tensor+"."+tag
		kn.table[i] = mmTable[class][i]
		kn.tableK[i] = kn.tiled + "_" + kn.table[i].name()
		kn.tableL[i] = kn.tableK[i] + "." + tag
	}
	return kn
}

// MatMul computes dst[b] = a[b] @ bm[b] (dst += … if accumulate) for every
// batch index, accumulating in float32. The last two dims of a and bm may
// have any strides (row-major and column-major operands are read in
// place); dst's rows are contiguous. Batch dims of a and bm broadcast to
// dst's (stride 0, or missing leading dims).
//
// Mixed precision: a and bm both float16 (or both bfloat16) multiply as
// simdgroup_half8x8 (simdgroup_bfloat8x8) fragments into float32
// accumulators — each product of two 16-bit values is exact in float32 —
// and dst is float32 or the operands' dtype, rounded once at the end (to
// nearest even; when accumulating, dst's old value is widened and added
// before that one rounding).
func (b *Backend) MatMul(dst, a, bm backend.View, accumulate bool) {
	checkKernelDType(kMatMul, floatTypes, dst, a, bm)
	in, out := a.DType(), dst.DType()
	if bm.DType() != in || (out != in && out != backend.Float32) {
		panic(fmt.Sprintf("metal: %s: dtypes dst %v, a %v, b %v: the operands share a dtype and dst is float32 or theirs",
			kMatMul, out, in, bm.DType()))
	}
	same := 0
	if out == in {
		same = 1
	}
	kn := matmulByDType[in][same]
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
		st, err := backend.BatchStrides(x, dst.Shape, rb)
		if err != nil {
			panic(fmt.Sprintf("metal: %s: %v", kMatMul, err))
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
	tensorOps := !naive && matmul2dLayout(m, k, int(p.ARs), int(p.ACs), aTrans) &&
		matmul2dLayout(k, n, int(p.BRs), int(p.BCs), bTrans) && b.matmul2dOn(a.DType())
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
		vec := [2]bool{
			!noMatMulVec && mmVec(m, k, int(q.ARs), int(q.ACs), aTrans, sub.view(bufs[1], 1).Offset, q.ABs[:q.NBatch]),
			!noMatMulVec && mmVec(k, n, int(q.BRs), int(q.BCs), bTrans, sub.view(bufs[2], 2).Offset, q.BBs[:q.NBatch]),
		}
		tkey := pkey(kn.tiled, cBool(0, aTrans), cBool(1, bTrans), cBool(2, m%mmBM == 0),
			cBool(3, n%mmBN == 0), cBool(4, k%mmBK == 0), cBool(5, accumulate), cBool(6, vec[0]), cBool(7, vec[1]))
		if !naive && len(sub.shape) == 0 {
			if s, chunk := b.splitKPlan(m, n, k); s > 1 && b.pipelineFor(splitKKey(kn, m, n, k, aTrans, bTrans, vec)).MaxThreads() >= mmThreads {
				b.matmulSplitK(kn, sub.view(bufs[0], 0), sub.view(bufs[1], 1), sub.view(bufs[2], 2), q, s, chunk, aTrans, bTrans, accumulate, vec)
				return
			}
		}
		c, av, bv := b.arg(sub.view(bufs[0], 0)), b.arg(sub.view(bufs[1], 1)), b.arg(sub.view(bufs[2], 2))
		if tensorOps && !naive && b.runMatMul2D(kn, q, nz, aTrans, bTrans, accumulate, c, av, bv) {
			return
		}
		var tp driver.Pipeline
		if !naive {
			// Whole tiles of the table's tile: its kernel (all aligned).
			if li := layoutIndex(aTrans, bTrans); !noMatMulTable.Load() && kn.table[li].fits(m, n, k) {
				t := kn.table[li]
				key := pkey(kn.tableK[li], cBool(0, aTrans), cBool(1, bTrans), cBool(2, true),
					cBool(3, true), cBool(4, true), cBool(5, accumulate), cBool(6, vec[0]), cBool(7, vec[1]))
				if p := b.pipelineFor(key); p.MaxThreads() >= t.threads() {
					groups := [3]int{n / t.bn, m / t.bm, nz}
					b.runPipe(kn.tableL[li], key, p, groups, [3]int{t.threads(), 1, 1}, c, av, bv, bytesArg(q))
					return
				}
			}
			tp = b.pipelineFor(tkey)
		}
		if naive || tp.MaxThreads() < mmThreads {
			// (A pipeline that cannot run the tiled kernel's simdgroups
			// takes the reference kernel: exact, slower.)
			key := pkey(kn.naive, cBool(5, accumulate))
			p := b.pipelineFor(key)
			t := mmNaiveTile // one thread per element: any square tile the pipeline allows
			for t > 1 && t*t > p.MaxThreads() {
				t /= 2
			}
			groups := [3]int{(n + t - 1) / t, (m + t - 1) / t, nz}
			b.runPipe(kn.naive, key, p, groups, [3]int{t, t, 1}, c, av, bv, bytesArg(q))
			return
		}
		groups := [3]int{(n + mmBN - 1) / mmBN, (m + mmBM - 1) / mmBM, nz}
		b.runPipe(kn.tiledL[layoutIndex(aTrans, bTrans)], tkey, tp, groups, [3]int{mmThreads, 1, 1}, c, av, bv, bytesArg(q))
	})
}

// splitKKey is the pipeline of split-K's partial products.
func splitKKey(kn matmulNames, m, n, k int, aTrans, bTrans bool, vec [2]bool) driver.PipelineKey {
	return pkey(kn.splitK, cBool(0, aTrans), cBool(1, bTrans), cBool(2, m%mmBM == 0),
		cBool(3, n%mmBN == 0), cBool(4, k%mmBK == 0), cBool(5, false), cBool(6, vec[0]), cBool(7, vec[1]))
}

// noMatMulVec turns the tiled kernels' vector staging off
// (FORGE_METAL_MATMUL_VEC=0): every operand takes the element-at-a-time
// edge path, for comparisons.
var noMatMulVec = os.Getenv("FORGE_METAL_MATMUL_VEC") == "0"

// mmVec reports whether an operand of rows × cols with strides rs, cs
// (trans: column-major), at element offset off of its buffer, with batch
// strides bs, can be staged four elements at a time (mm_vec_a, mm_vec_b in
// kernels/matmul.metal): its contiguous axis has stride 1 and a length that
// is a multiple of 4, and the other stride, the offset and the batch
// strides are multiples of 4 — so every vector is aligned (blocks start
// at 256 bytes) and wholly inside or outside the matrix.
func mmVec(rows, cols, rs, cs int, trans bool, off int, bs []int32) bool {
	if trans {
		rows, cols, rs, cs = cols, rows, cs, rs
	}
	if cs != 1 || cols%4 != 0 || rs%4 != 0 || off%4 != 0 {
		return false
	}
	for _, s := range bs {
		if s%4 != 0 {
			return false
		}
	}
	return true
}

// matmulSplitK runs one M × N × K product as s partial products over K
// chunks of chunk into a float32 scratch buffer, then their ordered sum
// into dst (rounded once to dst's dtype).
func (b *Backend) matmulSplitK(kn matmulNames, dst, a, bm backend.View, q matmulParams, s, chunk int, aTrans, bTrans, accumulate bool, vec [2]bool) {
	m, n, k := int(q.M), int(q.N), int(q.K)
	part := b.Alloc(backend.Float32, s*m*n)
	defer b.Free(part) // recycled once the command buffer completes
	pv := backend.View{Buf: part}
	q.KChunk, q.Splits = uint32(chunk), uint32(s)
	pq := q
	pq.CRs = int32(n) // the partials are rows of N
	key := splitKKey(kn, m, n, k, aTrans, bTrans, vec)
	groups := [3]int{(n + mmBN - 1) / mmBN, (m + mmBM - 1) / mmBM, s}
	b.run(kn.splitKL[layoutIndex(aTrans, bTrans)], key, groups, [3]int{mmThreads, 1, 1},
		b.arg(pv), b.arg(a), b.arg(bm), bytesArg(pq))
	rkey := pkey(kn.reduce, cBool(5, accumulate))
	b.runEW(kn.reduce, rkey, m*n, b.arg(dst), b.arg(pv), bytesArg(q))
}

// layoutTags name the operand layouts by layout index.
var layoutTags = [4]string{"nn", "nt", "tn", "tt"}

// layoutTag names the operand layouts: "nn", "nt", "tn" or "tt".
func layoutTag(aTrans, bTrans bool) string { return layoutTags[layoutIndex(aTrans, bTrans)] }

// layoutIndex indexes the operand layouts nn, nt, tn, tt (matmulNames' labels).
func layoutIndex(aTrans, bTrans bool) int {
	i := 0
	if aTrans {
		i = 2
	}
	if bTrans {
		i++
	}
	return i
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
		b.batchSplit(l.at(i), fn)
	}
}

// checkMatrixSpan panics when a matrix's offsets overflow int32.
func checkMatrixSpan(rows, cols int, strides []int) {
	span := absInt(strides[0])*(rows-1) + absInt(strides[1])*(cols-1)
	if span > math.MaxInt32 {
		panic(fmt.Sprintf("metal: %s: a %d×%d operand spans %d elements, beyond int32 offsets", kMatMul, rows, cols, span))
	}
}
