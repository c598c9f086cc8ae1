package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

var rkIndexDTypes = []backend.DType{backend.Float32, backend.Float64, backend.Int32}

// rkRoundTo rounds a float64 result to what dtype dt stores. Adding two
// float32 values in float64 and rounding once gives exactly the float32 sum
// (53 ≥ 2·24 + 2), so reference sums in float64 rounded after every add
// reproduce float32 accumulation bit for bit.
func rkRoundTo(dt backend.DType, v float64) float64 {
	switch dt {
	case backend.Float32:
		return float64(float32(v))
	case backend.Int32:
		return float64(int32(v))
	}
	return v
}

var rkDecades = []float64{1e-4, 1e-3, 1e-2, 0.1, 1, 10, 100, 1e3, 1e4}

// rkIndexData returns n values for dtype dt: small integers for Int32,
// otherwise float32-representable values of widely mixed magnitude, so the
// order of additions shows in the rounding.
func rkIndexData(rng *rand.Rand, dt backend.DType, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		if dt == backend.Int32 {
			x[i] = float64(rng.IntN(201) - 100)
		} else {
			x[i] = float64(float32(rng.NormFloat64() * rkDecades[rng.IntN(len(rkDecades))]))
		}
	}
	return x
}

// rkIndices returns n indices in [0, s), with repeats.
func rkIndices(rng *rand.Rand, n, s int) []float64 {
	idx := make([]float64, n)
	for i := range idx {
		idx[i] = float64(rng.IntN(s))
	}
	return idx
}

func rkProd(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// rkStridedIndex returns an Int32 view of idx whose elements sit every other
// slot of their buffer: a non-contiguous index tensor.
func rkStridedIndex(idx []float64) backend.View {
	v := rkView(backend.Int32, []int{2 * len(idx)}, nil)
	for i, x := range idx {
		buf(v).I32[v.Offset+2*i] = int32(x)
	}
	return backend.View{Buf: v.Buf, Offset: v.Offset, Shape: []int{len(idx)}, Strides: []int{2}}
}

type rkSelectCase struct {
	shape []int // src of IndexSelect, dst of IndexAdd
	axis  int
	ni    int // number of indices
}

func rkSelectCases() []rkSelectCase {
	return []rkSelectCase{
		{[]int{7, 5}, 0, 11},            // embedding lookup
		{[]int{3, 6, 4}, 1, 9},          // middle axis
		{[]int{4, 9}, 1, 6},             // last axis: Q = 1
		{[]int{2, 3, 5, 2}, 2, 7},       // two leading dimensions
		{[]int{5}, 0, 0},                // no indices: IndexAdd writes zeros
		{[]int{1000, 300}, 0, 1000},     // P = 1, narrow: split over rows s
		{[]int{50, 2048}, 0, 400},       // P = 1, wide: split over columns
		{[]int{64, 500, 3}, 1, 700},     // many slices: split over p
		{[]int{100000}, 0, 200000},      // P = Q = 1
		{[]int{3, 40000, 1}, 1, 100000}, // few slices, Q = 1
	}
}

// rkRefIndexSelect is dst[p, i, q] = src[p, idx[i], q].
func rkRefIndexSelect(src, idx []float64, p, s, q int) []float64 {
	ni := len(idx)
	dst := make([]float64, p*ni*q)
	for pp := 0; pp < p; pp++ {
		for i := 0; i < ni; i++ {
			for qq := 0; qq < q; qq++ {
				dst[(pp*ni+i)*q+qq] = src[(pp*s+int(idx[i]))*q+qq]
			}
		}
	}
	return dst
}

// rkRefIndexAdd is dst = 0; dst[p, idx[i], q] += src[p, i, q] for i in
// order, rounding as dtype dt after every add.
func rkRefIndexAdd(dt backend.DType, src, idx []float64, p, s, q int) []float64 {
	ni := len(idx)
	dst := make([]float64, p*s*q)
	for pp := 0; pp < p; pp++ {
		for i := 0; i < ni; i++ {
			for qq := 0; qq < q; qq++ {
				d := &dst[(pp*s+int(idx[i]))*q+qq]
				*d = rkRoundTo(dt, *d+src[(pp*ni+i)*q+qq])
			}
		}
	}
	return dst
}

// rkBitsEqual reports the first index where got and want differ in their
// bits (−1 if none).
func rkBitsEqual(got, want []float64) int {
	if len(got) != len(want) {
		return 0
	}
	for i := range got {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			return i
		}
	}
	return -1
}

func TestIndexSelectAndAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, c := range rkSelectCases() {
		p, s, q := backend.SplitAxis(c.shape, c.axis)
		idx := rkIndices(rng, c.ni, s)
		outShape := append(append(append([]int(nil), c.shape[:c.axis]...), c.ni), c.shape[c.axis+1:]...)
		for _, dt := range rkIndexDTypes {
			name := fmt.Sprintf("%v axis %d, %d indices, %v", c.shape, c.axis, c.ni, dt)
			src := rkIndexData(rng, dt, rkProd(c.shape))
			g := rkIndexData(rng, dt, rkProd(outShape))
			wantSel := rkRefIndexSelect(src, idx, p, s, q)
			wantAdd := rkRefIndexAdd(dt, g, idx, p, s, q)
			for _, workers := range []int{1, 3, 0} {
				b := rkBackend(workers)
				iv := rkView(backend.Int32, []int{c.ni}, idx)
				if workers == 3 {
					iv = rkStridedIndex(idx)
				}
				dst := rkView(dt, outShape, nil)
				b.IndexSelect(dst, rkView(dt, c.shape, src), iv, c.axis)
				rkCheckPads(t, "index_select", dst)
				if i := rkBitsEqual(rkRead(dst), wantSel); i >= 0 {
					t.Fatalf("index_select %s, %d workers: element %d differs", name, workers, i)
				}
				acc := rkView(dt, c.shape, rkIndexData(rng, dt, rkProd(c.shape))) // garbage to overwrite
				b.IndexAdd(acc, rkView(dt, outShape, g), iv, c.axis)
				rkCheckPads(t, "index_add", acc)
				if i := rkBitsEqual(rkRead(acc), wantAdd); i >= 0 {
					t.Fatalf("index_add %s, %d workers: element %d = %v, want %v (bitwise, index order)",
						name, workers, i, rkRead(acc)[i], wantAdd[i])
				}
			}
		}
	}
}

type rkGatherCase struct {
	src  []int
	idx  []int // idx and dst shape: src's except along axis
	axis int
}

func rkGatherCases() []rkGatherCase {
	return []rkGatherCase{
		{[]int{4, 7, 3}, []int{4, 5, 3}, 1},
		{[]int{6, 10}, []int{6, 4}, 1},              // along the last axis (Q = 1)
		{[]int{9, 4}, []int{12, 4}, 0},              // more indices than rows
		{[]int{2, 3, 4, 5}, []int{2, 3, 2, 5}, 2},   // two leading dimensions
		{[]int{2000, 50}, []int{2000, 30}, 1},       // many slices
		{[]int{100000}, []int{300000}, 0},           // P = Q = 1: split over rows s
		{[]int{300, 600}, []int{500, 600}, 0},       // P = 1, wide: split over columns
		{[]int{2, 50000, 1}, []int{2, 80000, 1}, 1}, // few slices, Q = 1
		{[]int{3, 0, 4}, []int{3, 0, 4}, 1},         // empty
		{[]int{3, 5, 4}, []int{3, 0, 4}, 1},         // no indices: ScatterAdd writes zeros
		{[]int{1, 64, 513}, []int{1, 100, 513}, 1},  // one slice, wide rows
		{[]int{5, 1000, 7}, []int{5, 1000, 7}, 1},   // permutation-sized
		{[]int{8, 3, 1000}, []int{8, 2, 1000}, 1},   // slices ≥ workers
		{[]int{1, 64, 2048}, []int{1, 8, 2048}, 1},  // few indices, wide
	}
}

func TestGatherAndScatterAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	for _, c := range rkGatherCases() {
		p, ni, q := backend.SplitAxis(c.idx, c.axis)
		s := c.src[c.axis]
		n := rkProd(c.idx)
		var idx []float64
		if s > 0 {
			idx = rkIndices(rng, n, s)
		}
		for _, dt := range rkIndexDTypes {
			name := fmt.Sprintf("src %v idx %v axis %d %v", c.src, c.idx, c.axis, dt)
			src := rkIndexData(rng, dt, rkProd(c.src))
			g := rkIndexData(rng, dt, n)
			wantG := make([]float64, n)
			wantS := make([]float64, rkProd(c.src))
			for pp := 0; pp < p; pp++ {
				for i := 0; i < ni; i++ {
					for qq := 0; qq < q; qq++ {
						k := (pp*ni+i)*q + qq
						at := (pp*s+int(idx[k]))*q + qq
						wantG[k] = src[at]
						wantS[at] = rkRoundTo(dt, wantS[at]+g[k])
					}
				}
			}
			for _, workers := range []int{1, 2, 5, 0} {
				b := rkBackend(workers)
				iv := rkView(backend.Int32, c.idx, idx)
				dst := rkView(dt, c.idx, nil)
				b.Gather(dst, rkView(dt, c.src, src), iv, c.axis)
				rkCheckPads(t, "gather", dst)
				if i := rkBitsEqual(rkRead(dst), wantG); i >= 0 {
					t.Fatalf("gather %s, %d workers: element %d differs", name, workers, i)
				}
				acc := rkView(dt, c.src, rkIndexData(rng, dt, rkProd(c.src)))
				b.ScatterAdd(acc, rkView(dt, c.idx, g), iv, c.axis)
				rkCheckPads(t, "scatter_add", acc)
				if i := rkBitsEqual(rkRead(acc), wantS); i >= 0 {
					t.Fatalf("scatter_add %s, %d workers: element %d = %v, want %v (bitwise, index order)",
						name, workers, i, rkRead(acc)[i], wantS[i])
				}
			}
		}
	}
}

// TestIndexAdjoint checks ⟨select(x), g⟩ = ⟨x, add(g)⟩ for both pairs: the
// adds are the adjoints (hence the gradients) of the selections.
func TestIndexAdjoint(t *testing.T) {
	b := rkBackend(0)
	rng := rand.New(rand.NewPCG(35, 36))
	dt := backend.Float64
	for _, c := range rkSelectCases()[:4] {
		_, s, _ := backend.SplitAxis(c.shape, c.axis)
		idx := rkIndices(rng, c.ni, s)
		out := append(append(append([]int(nil), c.shape[:c.axis]...), c.ni), c.shape[c.axis+1:]...)
		x, g := rkNormal(rng, rkProd(c.shape), 1, 0), rkNormal(rng, rkProd(out), 1, 0)
		sel, add := rkView(dt, out, nil), rkView(dt, c.shape, nil)
		iv := rkView(backend.Int32, []int{c.ni}, idx)
		b.IndexSelect(sel, rkView(dt, c.shape, x), iv, c.axis)
		b.IndexAdd(add, rkView(dt, out, g), iv, c.axis)
		if l, r := rkDot(rkRead(sel), g), rkDot(x, rkRead(add)); math.Abs(l-r) > 1e-12*max(1, math.Abs(l)) {
			t.Errorf("index_select/index_add %v: ⟨select x, g⟩ = %v, ⟨x, add g⟩ = %v", c.shape, l, r)
		}
	}
	for _, c := range rkGatherCases()[:4] {
		s := c.src[c.axis]
		idx := rkIndices(rng, rkProd(c.idx), s)
		x, g := rkNormal(rng, rkProd(c.src), 1, 0), rkNormal(rng, rkProd(c.idx), 1, 0)
		gat, sca := rkView(dt, c.idx, nil), rkView(dt, c.src, nil)
		iv := rkView(backend.Int32, c.idx, idx)
		b.Gather(gat, rkView(dt, c.src, x), iv, c.axis)
		b.ScatterAdd(sca, rkView(dt, c.idx, g), iv, c.axis)
		if l, r := rkDot(rkRead(gat), g), rkDot(x, rkRead(sca)); math.Abs(l-r) > 1e-12*max(1, math.Abs(l)) {
			t.Errorf("gather/scatter_add %v: ⟨gather x, g⟩ = %v, ⟨x, scatter g⟩ = %v", c.src, l, r)
		}
	}
}

// TestIndexOutOfRangePanics checks that a bad index panics on the calling
// goroutine (recoverable) rather than inside a worker.
func TestIndexOutOfRangePanics(t *testing.T) {
	b := rkBackend(4)
	src := rkView(backend.Float32, []int{4, 3}, nil)
	for _, bad := range []float64{-1, 4} {
		for name, call := range map[string]func(){
			"index_select": func() {
				b.IndexSelect(rkView(backend.Float32, []int{2, 3}, nil), src, rkView(backend.Int32, []int{2}, []float64{0, bad}), 0)
			},
			"index_add": func() {
				b.IndexAdd(src, rkView(backend.Float32, []int{2, 3}, nil), rkView(backend.Int32, []int{2}, []float64{bad, 0}), 0)
			},
			"gather": func() {
				b.Gather(rkView(backend.Float32, []int{1, 3}, nil), src, rkView(backend.Int32, []int{1, 3}, []float64{0, bad, 1}), 0)
			},
			"scatter_add": func() {
				b.ScatterAdd(src, rkView(backend.Float32, []int{1, 3}, nil), rkView(backend.Int32, []int{1, 3}, []float64{0, 1, bad}), 0)
			},
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s with index %v did not panic", name, bad)
					}
				}()
				call()
			}()
		}
	}
}

func BenchmarkEmbeddingBackwardF32(bb *testing.B) {
	// IndexAdd of (B·T, C) gradients into a (V, C) table.
	b := New()
	rng := rand.New(rand.NewPCG(37, 38))
	const v, c, n = 4096, 256, 8192
	idx := rkView(backend.Int32, []int{n}, rkIndices(rng, n, v))
	g, dst := rkView(backend.Float32, []int{n, c}, rkNormal(rng, n*c, 1, 0)), rkView(backend.Float32, []int{v, c}, nil)
	bb.SetBytes(int64(4 * c * (n + v)))
	for bb.Loop() {
		b.IndexAdd(dst, g, idx, 0)
	}
}
