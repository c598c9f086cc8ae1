package metal

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/half"
)

// TestMMVec: which operands the tiled kernels stage four elements at a
// time.
func TestMMVec(t *testing.T) {
	for _, tc := range []struct {
		rows, cols, rs, cs int
		trans              bool
		off                int
		bs                 []int32
		want               bool
	}{
		{36, 20, 20, 1, false, 0, nil, true},          // row-major, K = 20
		{36, 20, 20, 1, false, 4, []int32{720}, true}, // offset and batch stride multiples of 4
		{36, 20, 20, 1, false, 2, nil, false},         // misaligned offset
		{36, 20, 20, 1, false, 0, []int32{722}, false},
		{36, 18, 18, 1, false, 0, nil, false}, // contiguous length not a multiple of 4
		{36, 20, 1, 36, true, 0, nil, true},   // column-major: the rows (36) are contiguous
		{34, 20, 1, 34, true, 0, nil, false},  // … 34 of them
		{36, 20, 24, 1, false, 0, nil, true},  // padded rows
		{36, 20, 22, 1, false, 0, nil, false}, // … misaligned
		{36, 20, 40, 2, false, 0, nil, false}, // no unit stride
	} {
		if got := mmVec(tc.rows, tc.cols, tc.rs, tc.cs, tc.trans, tc.off, tc.bs); got != tc.want {
			t.Errorf("mmVec(%+v) = %v", tc, got)
		}
	}
}

// TestMatMulVecStaging runs the tiled kernels with vector staging on
// operands that allow it — every layout, float32 and float16, sizes that
// are multiples of 4 but not of the tiles (so the vectors meet the
// matrices' edges), offsets of 0 and 4 elements, batched, accumulating,
// split-K — and checks each product against the float64 sums' error
// bound and, bit for bit, against the same product staged element by
// element (FORGE_METAL_MATMUL_VEC=0's path): staging moves the same
// values, so nothing else may change. The pipelines run must be the
// vector ones.
func TestMatMulVecStaging(t *testing.T) {
	e := newOpsEnv(t)
	defer func() { noMatMulVec = false }()
	type mcase struct {
		batch   []int
		m, n, k int
		off     int
	}
	cases := []mcase{
		{nil, 36, 44, 20, 0}, {nil, 64, 64, 64, 4}, {nil, 12, 8, 52, 0}, {nil, 4, 100, 8, 4},
		{[]int{3}, 20, 12, 28, 4},
	}
	// A split-K shape: few output tiles, long K.
	if s, _ := e.dev.splitKPlan(32, 32, 4096); s > 1 {
		cases = append(cases, mcase{nil, 32, 32, 4096, 0})
	} else {
		t.Errorf("32×32×4096 does not take split-K here: the test needs a split-K shape")
	}
	run := func(dt backend.DType, a, b, c backend.View, cInit []uint32, acc bool, vec bool) []uint32 {
		noMatMulVec = !vec
		writeBits(e.dev, c.Buf, cInit)
		e.dev.MatMul(c, a, b, acc)
		return readBits(e.dev, c.Buf, c.Buf.Len())
	}
	withMatMul(pathSimdgroup, true, func() { // the tiled kernels, not matmul2d
		for _, dt := range []backend.DType{backend.Float32, backend.Float16} {
			for _, cs := range cases {
				for _, ta := range []bool{false, true} {
					for _, tb := range []bool{false, true} {
						for _, acc := range []bool{false, true} {
							name := fmt.Sprintf("%v %v %dx%dx%d off %d ta=%v tb=%v acc=%v", dt, cs.batch, cs.m, cs.n, cs.k, cs.off, ta, tb, acc)
							bst := make([]int, len(cs.batch))
							for i := range bst {
								bst[i] = 1
							}
							as := mmOperand(cs.batch, bst, cs.m, cs.k, ta, cs.off).full()
							bs := mmOperand(nil, nil, cs.k, cs.n, tb, cs.off).full()
							if dt == backend.Float32 {
								noMatMulVec = false
								e.f32MatMulViews(name, cs.batch, nil, as, bs, cs.m, cs.n, cs.k, acc)
							}
							av := upload(e.dev, dt, as, 1)
							bv := upload(e.dev, dt, bs, 2)
							cshape := append(slices.Clone(cs.batch), cs.m, cs.n)
							cv := upload(e.dev, dt, contig(cshape...).full(), 3)
							cInit := readBits(e.dev, cv.Buf, cv.Buf.Len())
							vec := run(dt, av, bv, cv, cInit, acc, true)
							scalar := run(dt, av, bv, cv, cInit, acc, false)
							if !slices.Equal(vec, scalar) {
								t.Errorf("%s: vector staging changed the result", name)
							}
						}
					}
				}
			}
		}
	})
	var vecPipes []string
	for k := range e.dev.pipes {
		if strings.HasPrefix(k, "matmul_") && strings.Contains(k, "6:bool=1") && strings.Contains(k, "7:bool=1") {
			vecPipes = append(vecPipes, k)
		}
	}
	slices.Sort(vecPipes)
	for _, want := range []string{"matmul_f32[", "matmul_f16[", "matmul_splitk_f32[", "matmul_splitk_f16["} {
		if !slices.ContainsFunc(vecPipes, func(k string) bool { return strings.HasPrefix(k, want) }) {
			t.Errorf("no %s… pipeline with vector staging of both operands ran; vector pipelines: %v", want, vecPipes)
		}
	}
}

// upload allocates a buffer for view spec s of dtype dt, fills it with
// values that depend on the seed and the position, and returns the view.
func upload(b *Backend, dt backend.DType, s vspec, seed int) backend.View {
	n := max(s.extent(), 1)
	buf := b.Alloc(dt, n)
	h := make([]float32, n)
	for i := range h {
		h[i] = float32(math.Sin(float64(seed*7919+i)) * 2)
	}
	if dt == backend.Float32 {
		b.Write(buf, h)
	} else {
		bits := make([]uint16, n)
		for i, x := range h {
			bits[i] = toHalfBits(dt, x)
		}
		b.Write(buf, bits)
	}
	return backend.View{Buf: buf, Offset: s.off, Shape: s.shape, Strides: s.strides}
}

func toHalfBits(dt backend.DType, x float32) uint16 {
	if dt == backend.BFloat16 {
		return half.BFloat16Bits(x)
	}
	return half.Float16Bits(x)
}

// writeBits writes readBits' bits back into b.
func writeBits(dev *Backend, b backend.Buffer, bits []uint32) {
	switch b.DType() {
	case backend.Float32:
		h := make([]float32, len(bits))
		for i, x := range bits {
			h[i] = math.Float32frombits(x)
		}
		dev.Write(b, h)
	default:
		h := make([]uint16, len(bits))
		for i, x := range bits {
			h[i] = uint16(x)
		}
		dev.Write(b, h)
	}
}

// TestMatMulTileTable: products of whole tiles take the table's tile for
// their layout and operand type (mmTable), every other product the edge
// kernel; and the table's kernels give, bit for bit, the edge kernel's
// result — a tile changes which threadgroup computes an element and how
// much of K is staged at once, not the order of the 8×8 products along K.
// Every layout, float32, float16 and bfloat16, accumulating or not,
// batched, with and without vector staging.
func TestMatMulTileTable(t *testing.T) {
	e := newOpsEnv(t)
	defer noMatMulTable.Store(false)
	defer func() { noMatMulVec = false }()
	type mcase struct {
		batch   []int
		m, n, k int
		off     int
	}
	cases := []mcase{{nil, 64, 128, 96, 0}, {nil, 128, 64, 32, 1}, {[]int{2}, 64, 64, 64, 4}}
	withMatMul(pathSimdgroup, false, func() {
		for _, dt := range []backend.DType{backend.Float32, backend.Float16, backend.BFloat16} {
			for _, cs := range cases {
				for li, lt := range layoutTags {
					ta, tb := li >= 2, li%2 == 1
					for _, acc := range []bool{false, true} {
						name := fmt.Sprintf("%v %v %dx%dx%d off %d %s acc=%v", dt, cs.batch, cs.m, cs.n, cs.k, cs.off, lt, acc)
						bst := make([]int, len(cs.batch))
						for i := range bst {
							bst[i] = 1
						}
						av := upload(e.dev, dt, mmOperand(cs.batch, bst, cs.m, cs.k, ta, cs.off).full(), 1)
						bv := upload(e.dev, dt, mmOperand(nil, nil, cs.k, cs.n, tb, cs.off).full(), 2)
						cv := upload(e.dev, dt, contig(append(slices.Clone(cs.batch), cs.m, cs.n)...).full(), 3)
						cInit := readBits(e.dev, cv.Buf, cv.Buf.Len())
						run := func(table bool) ([]uint32, []string) {
							noMatMulTable.Store(!table)
							writeBits(e.dev, cv.Buf, cInit)
							labels := encoded(e.dev, func() { e.dev.MatMul(cv, av, bv, acc) })
							return readBits(e.dev, cv.Buf, cv.Buf.Len()), labels
						}
						for _, vec := range []bool{true, false} {
							noMatMulVec = !vec
							got, gl := run(true)
							want, wl := run(false)
							kn := matmulByDType[dt][1] // dst of the operands' dtype
							if want := kn.tableL[li]; !slices.Equal(gl, []string{want}) {
								t.Errorf("%s: ran %v, want the table's %s", name, gl, want)
							}
							if !slices.Equal(wl, []string{kn.tiledL[li]}) {
								t.Errorf("%s: edge path ran %v", name, wl)
							}
							if !slices.Equal(got, want) {
								t.Errorf("%s vec=%v: the table's tile %v gave a different result from the edge kernel", name, vec, kn.table[li])
							}
						}
						// One row short of a tile: the edge kernel.
						if cs.batch == nil && !ta {
							noMatMulTable.Store(false)
							short := backend.View{Buf: av.Buf, Offset: av.Offset, Shape: []int{cs.m - 1, cs.k}, Strides: av.Strides}
							cshort := backend.View{Buf: cv.Buf, Offset: 0, Shape: []int{cs.m - 1, cs.n}, Strides: cv.Strides}
							kn := matmulByDType[dt][1] // dst of the operands' dtype
							if l := encoded(e.dev, func() { e.dev.MatMul(cshort, short, bv, acc) }); !slices.Equal(l, []string{kn.tiledL[li]}) {
								t.Errorf("%s with M-1 rows: ran %v, want the edge kernel", name, l)
							}
						}
					}
				}
			}
		}
	})
}
