package metal

// IndexSelect, IndexAdd, Gather and ScatterAdd (ops_index.go) against the
// CPU backend: every radix-pass count of the IndexAdd sort (odd and even,
// so the result lands in either scratch half), index lists longer than
// the sort's threads and not a multiple of them, rows with no index and
// rows with many, strided index lists, every axis, int32 data. The adds
// must match the CPU bit for bit (the same additions in the same order),
// under every thread schedule too. The data is float32 or int32: 16-bit
// data is refused.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

// wide draws values over eight decades, so that a sum in another order
// rounds differently.
func (e *opsEnv) wide(int) float64 {
	return e.rng.NormFloat64() * math.Pow(10, 8*e.rng.Float64()-4)
}

// dataGen is the generator for a data dtype: wide floats, or int32 values
// whose sums stay in range.
func (e *opsEnv) dataGen(dt backend.DType) func(int) float64 {
	if dt == backend.Int32 {
		return func(int) float64 { return float64(e.rng.IntN(2001) - 1000) }
	}
	return e.wide
}

// indexGen draws indices in [0, s); with skew, most fall on a few rows
// (long lists), and some rows get none.
func (e *opsEnv) indexGen(s int, skew bool) func(int) float64 {
	return func(int) float64 {
		if skew && e.rng.IntN(4) != 0 {
			return float64(e.rng.IntN(min(s, 3)))
		}
		return float64(e.rng.IntN(s))
	}
}

var indexDTypes = []backend.DType{backend.Float32, backend.Int32}

// stridedPair is newPair for an input that the device gets as the strided
// view s and the CPU as a contiguous copy (the CPU's indexing kernels take
// contiguous data, as forge passes it; the Metal ops copy a strided one).
func (e *opsEnv) stridedPair(dt backend.DType, s vspec, gen func(int) float64) pair {
	p := e.newPair(dt, s, gen)
	if s.strides == nil {
		return p
	}
	c := contig(s.shape...)
	buf := e.ref.Alloc(dt, max(c.extent(), 1))
	cv := backend.View{Buf: buf, Shape: s.shape, Strides: backend.ContiguousStrides(s.shape)}
	e.ref.Copy(cv, p.ref)
	p.ref = cv
	return p
}

func TestOpsIndexSelect(t *testing.T) {
	e := newOpsEnv(t)
	type icase struct {
		src  vspec
		axis int
		idx  vspec // 1-D, possibly strided
	}
	cases := []icase{
		{contig(7, 13), 0, contig(20)},
		{contig(7, 13), 1, vspec{shape: []int{9}, strides: []int{3}, off: 2}},
		{contig(3, 5, 4), 1, contig(8)},
		{contig(3, 5, 4), 2, contig(1)},
		{contig(50, 64), 0, contig(1000)},
		{contig(11), 0, contig(300)},
		{vspec{shape: []int{6, 5}, strides: []int{1, 6}, off: 1}, 1, contig(7)}, // transposed src
		{contig(4, 0, 3), 1, contig(0)},
	}
	for _, c := range cases {
		s := c.src.shape[c.axis]
		for _, dt := range indexDTypes {
			src := e.stridedPair(dt, c.src, e.dataGen(dt))
			idx := e.newPair(backend.Int32, c.idx, e.indexGen(max(s, 1), false))
			dshape := append([]int(nil), c.src.shape...)
			dshape[c.axis] = c.idx.shape[0]
			dst := e.newPair(dt, contig(dshape...), func(int) float64 { return 5 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.IndexSelect(v(dst), v(src), v(idx), c.axis) })
			e.compare(fmt.Sprintf("index_select %v src %v axis %d idx %v", dt, c.src, c.axis, c.idx), dst, 0)
		}
	}
}

// indexAddCases cover 1 to 5 radix passes (S = 15: 1; 16: 2; 300: 3;
// 5000: 4; 70000: 5), index counts below, at and above the sort's 256
// threads, P > 1 and Q = 1.
var indexAddCases = []struct {
	dst  []int
	axis int
	ni   int
	skew bool
}{
	{[]int{15, 8}, 0, 40, false},
	{[]int{16, 3}, 0, 257, true},
	{[]int{300, 17}, 0, 1000, false},
	{[]int{300, 5}, 0, 3001, true},
	{[]int{5000, 2}, 0, 700, false},
	{[]int{70000, 1}, 0, 513, false},
	{[]int{3, 40, 6}, 1, 255, true},
	{[]int{4, 9}, 1, 1, false},
	{[]int{1, 1}, 0, 300, false},
	{[]int{5, 2}, 0, 0, false},
}

func TestOpsIndexAdd(t *testing.T) {
	e := newOpsEnv(t)
	for _, c := range indexAddCases {
		s := c.dst[c.axis]
		for _, dt := range indexDTypes {
			sshape := append([]int(nil), c.dst...)
			sshape[c.axis] = c.ni
			src := e.newPair(dt, contig(sshape...), e.dataGen(dt))
			idx := e.newPair(backend.Int32, contig(c.ni), e.indexGen(s, c.skew))
			dst := e.newPair(dt, contig(c.dst...), func(int) float64 { return 9 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.IndexAdd(v(dst), v(src), v(idx), c.axis) })
			e.compare(fmt.Sprintf("index_add %v dst %v axis %d I %d skew %v", dt, c.dst, c.axis, c.ni, c.skew), dst, 0)
		}
	}
	// A strided index list and a strided (transposed) src.
	src := e.stridedPair(backend.Float32, vspec{shape: []int{30, 7}, strides: []int{1, 30}, off: 3}, e.wide)
	idx := e.newPair(backend.Int32, vspec{shape: []int{30}, strides: []int{2}, off: 1}, e.indexGen(20, true))
	dst := e.newPair(backend.Float32, contig(20, 7), func(int) float64 { return 9 })
	e.both(func(be backend.Backend, v func(pair) backend.View) { be.IndexAdd(v(dst), v(src), v(idx), 0) })
	e.compare("index_add strided idx and src", dst, 0)
}

// TestOpsIndexAddOrder checks the sum order against a float64-free
// reference of its own: values whose float32 sum depends on the order
// (1, 2^24, −2^24 in index order give 0, not 1).
func TestOpsIndexAddOrder(t *testing.T) {
	e := newOpsEnv(t)
	vals := []float32{1, 1 << 24, -(1 << 24), 3, 1 << 25, -(1 << 25)}
	ids := []int32{2, 2, 2, 0, 0, 0}
	src := e.dev.Alloc(backend.Float32, len(vals))
	e.dev.Write(src, vals)
	ib := e.dev.Alloc(backend.Int32, len(ids))
	e.dev.Write(ib, ids)
	dst := e.dev.Alloc(backend.Float32, 3)
	e.dev.IndexAdd(backend.View{Buf: dst, Shape: []int{3, 1}, Strides: []int{1, 1}},
		backend.View{Buf: src, Shape: []int{6, 1}, Strides: []int{1, 1}},
		backend.View{Buf: ib, Shape: []int{6}, Strides: []int{1}}, 0)
	got := make([]float32, 3)
	e.dev.Read(dst, got)
	// In index order: ((0+1)+2^24)−2^24 = 0 (1 is absorbed), ((0+3)+2^25)−2^25 = 4.
	if want := []float32{4, 0, 0}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("index_add order: got %v, want %v", got, want)
	}
}

func TestOpsGatherScatterAdd(t *testing.T) {
	e := newOpsEnv(t)
	type gcase struct {
		src  []int // (…, S, …)
		axis int
		ni   int // the index extent along axis
	}
	cases := []gcase{
		{[]int{4, 5, 6}, 0, 7},
		{[]int{4, 5, 6}, 1, 3},
		{[]int{4, 5, 6}, 2, 9},
		{[]int{3000}, 0, 5000},     // P·Q = 1: ScatterAdd sorts (3 passes)
		{[]int{2, 1000}, 1, 999},   // P·Q = 2 (3 passes)
		{[]int{2, 300, 4}, 1, 301}, // P·Q = 8, the most that sorts
		{[]int{4, 2000, 2}, 1, 77}, // 4 passes
		{[]int{3, 3, 3}, 1, 40},    // P·Q = 9: one thread a column
		{[]int{64, 80}, 0, 100},
		{[]int{3, 1}, 1, 4},
		{[]int{0, 4}, 1, 2},
	}
	for _, c := range cases {
		s := c.src[c.axis]
		ishape := append([]int(nil), c.src...)
		ishape[c.axis] = c.ni
		for _, dt := range indexDTypes {
			src := e.newPair(dt, contig(c.src...), e.dataGen(dt))
			idx := e.newPair(backend.Int32, contig(ishape...), e.indexGen(max(s, 1), c.ni > 500))
			dst := e.newPair(dt, contig(ishape...), func(int) float64 { return 5 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Gather(v(dst), v(src), v(idx), c.axis) })
			e.compare(fmt.Sprintf("gather %v src %v axis %d I %d", dt, c.src, c.axis, c.ni), dst, 0)

			g := e.newPair(dt, contig(ishape...), e.dataGen(dt))
			dx := e.newPair(dt, contig(c.src...), func(int) float64 { return 9 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.ScatterAdd(v(dx), v(g), v(idx), c.axis) })
			e.compare(fmt.Sprintf("scatter_add %v dst %v axis %d I %d", dt, c.src, c.axis, c.ni), dx, 0)
		}
	}
	// Strided src and index views (copied to contiguous first).
	src := e.stridedPair(backend.Float32, vspec{shape: []int{5, 6}, strides: []int{1, 5}}, e.wide)
	idx := e.newPair(backend.Int32, vspec{shape: []int{5, 4}, strides: []int{1, 5}, off: 2}, e.indexGen(6, false))
	dst := e.newPair(backend.Float32, contig(5, 4), func(int) float64 { return 5 })
	e.both(func(be backend.Backend, v func(pair) backend.View) { be.Gather(v(dst), v(src), v(idx), 1) })
	e.compare("gather strided", dst, 0)
	g := e.stridedPair(backend.Float32, vspec{shape: []int{5, 4}, strides: []int{4, 1}, off: 1}, e.wide)
	dx := e.newPair(backend.Float32, contig(5, 6), func(int) float64 { return 9 })
	e.both(func(be backend.Backend, v func(pair) backend.View) { be.ScatterAdd(v(dx), v(g), v(idx), 1) })
	e.compare("scatter_add strided idx", dx, 0)
}

// TestOpsIndexRefused: float64 is refused with the backend's message
// (before any kernel); 16-bit data, which these kernels do not take,
// panics naming the kernel and the dtype.
func TestOpsIndexRefused(t *testing.T) {
	refusesFloat64(t, func(b *Backend, f64 backend.View) map[string]func() {
		return map[string]func(){
			kIndexSelect: func() { b.IndexSelect(f64, f64, f64, 0) },
			kIndexAdd:    func() { b.IndexAdd(f64, f64, f64, 0) },
			kGather:      func() { b.Gather(f64, f64, f64, 0) },
			kScatterAdd:  func() { b.ScatterAdd(f64, f64, f64, 0) },
		}
	})
	e := newOpsEnv(t)
	idx := e.newPair(backend.Int32, contig(2), func(i int) float64 { return float64(i) })
	for _, dt := range halfTypes {
		src := e.newPair(dt, contig(3, 4), e.normal)
		dst := e.newPair(dt, contig(2, 4), e.normal)
		for name, fn := range map[string]func(){
			kIndexSelect: func() { e.dev.IndexSelect(dst.dev, src.dev, idx.dev, 0) },
			kIndexAdd:    func() { e.dev.IndexAdd(src.dev, dst.dev, idx.dev, 0) },
		} {
			wantPanic(t, fmt.Sprintf("%s %v", name, dt), fn, "metal: "+name+": ", "unsupported dtype "+dt.String())
		}
		gi := e.newPair(backend.Int32, contig(2, 4), func(int) float64 { return 1 })
		for name, fn := range map[string]func(){
			kGather:     func() { e.dev.Gather(dst.dev, src.dev, gi.dev, 0) },
			kScatterAdd: func() { e.dev.ScatterAdd(src.dev, dst.dev, gi.dev, 0) },
		} {
			wantPanic(t, fmt.Sprintf("%s %v", name, dt), fn, "metal: "+name+": ", "unsupported dtype "+dt.String())
		}
	}
}

func TestOpsIndexKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range indexKernels {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}

// TestOpsIndexSchedules runs the kernels of index.metal (the radix sort,
// the ordered adds, both ScatterAdd routes) under the forward, reverse and
// random thread orders: the results must agree bit for bit.
func TestOpsIndexSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(5, 6))
	const s, ni, q = 300, 700, 5
	data := make([]float32, ni*q)
	for i := range data {
		data[i] = float32(gen.NormFloat64() * math.Pow(10, 6*gen.Float64()-3))
	}
	ids := make([]int32, ni)
	for i := range ids {
		ids[i] = int32(gen.IntN(s))
	}
	run := func() [][]uint32 {
		var outs [][]uint32
		read := func(buf backend.Buffer, k int) { outs = append(outs, readBits(e.dev, buf, k)) }
		up := func(h any, dt backend.DType, k int) backend.Buffer {
			b := e.dev.Alloc(dt, k)
			e.dev.Write(b, h)
			return b
		}
		vw := func(b backend.Buffer, shape ...int) backend.View { return contigView(b, 0, shape...) }
		src, ib := up(data, backend.Float32, ni*q), up(ids, backend.Int32, ni)
		dst := e.dev.Alloc(backend.Float32, s*q)
		e.dev.IndexAdd(vw(dst, s, q), vw(src, ni, q), vw(ib, ni), 0)
		read(dst, s*q)
		// ScatterAdd along axis 0 of (ni, q) into (s, q): idx (ni, q).
		ib2 := e.dev.Alloc(backend.Int32, ni*q)
		e.dev.Write(ib2, append(append(append(append(append([]int32(nil), ids...), ids...), ids...), ids...), ids...))
		dx := e.dev.Alloc(backend.Float32, s*q)
		e.dev.ScatterAdd(vw(dx, s, q), vw(src, ni, q), vw(ib2, ni, q), 0)
		read(dx, s*q)
		// And with 50 columns (one thread a column): (70, 50) into (30, 50).
		ib3 := e.dev.Alloc(backend.Int32, 70*50)
		col := make([]int32, 70*50)
		for i := range col {
			col[i] = ids[i%ni] % 30
		}
		e.dev.Write(ib3, col)
		dx3 := e.dev.Alloc(backend.Float32, 30*50)
		e.dev.ScatterAdd(vw(dx3, 30, 50), vw(src, 70, 50), vw(ib3, 70, 50), 0)
		read(dx3, 30*50)
		return outs
	}
	schedulesAgree(t, drv, run, nil)
}

// BenchmarkOpsIndex times the kernels on the emulator (go test -bench
// OpsIndex -run '^$' ./metal): it measures the emulation, not a GPU.
func BenchmarkOpsIndex(b *testing.B) {
	dev := opsBenchDevice(b)
	gen := rand.New(rand.NewPCG(7, 8))
	const vocab, ni, q = 4096, 2048, 128
	up := func(dt backend.DType, shape ...int) backend.View { return benchRandView(dev, gen, vocab, dt, shape...) }
	wte, ids, x := up(backend.Float32, vocab, q), up(backend.Int32, ni), up(backend.Float32, ni, q)
	b.Run(fmt.Sprintf("index_select_%dx%d_from_%d", ni, q, vocab), func(b *testing.B) {
		for b.Loop() {
			dev.IndexSelect(x, wte, ids, 0)
			dev.Sync()
		}
	})
	b.Run(fmt.Sprintf("index_add_%dx%d_into_%d", ni, q, vocab), func(b *testing.B) {
		for b.Loop() {
			dev.IndexAdd(wte, x, ids, 0)
			dev.Sync()
		}
	})
	// ScatterAdd: 64 columns (one thread each), and one long 1-D list
	// (the sorted route).
	for _, c := range []struct{ dst, idx []int }{{[]int{64, 4096}, []int{64, 1}}, {[]int{100000}, []int{100000}}} {
		g, ix, dx := up(backend.Float32, c.idx...), up(backend.Int32, c.idx...), up(backend.Float32, c.dst...)
		if len(c.idx) == 2 {
			h := make([]int32, c.idx[0])
			for i := range h {
				h[i] = int32(gen.IntN(c.dst[1]))
			}
			dev.Write(ix.Buf, h)
		}
		b.Run(fmt.Sprintf("scatter_add_%v_into_%v", c.idx, c.dst), func(b *testing.B) {
			for b.Loop() {
				dev.ScatterAdd(dx, g, ix, len(c.dst)-1)
				dev.Sync()
			}
		})
	}
}

// benchRandView is a contiguous tensor of shape on dev: float32 normal
// values, or int32 indices below the last dim (below vocab for a 1-D
// shape), drawn from gen.
func benchRandView(dev *Backend, gen *rand.Rand, vocab int, dt backend.DType, shape ...int) backend.View {
	n := 1
	for _, d := range shape {
		n *= d
	}
	buf := dev.Alloc(dt, n)
	if dt == backend.Int32 {
		h := make([]int32, n)
		for i := range h {
			h[i] = int32(gen.IntN(shape[len(shape)-1]))
		}
		if len(shape) == 1 {
			for i := range h {
				h[i] = int32(gen.IntN(vocab))
			}
		}
		dev.Write(buf, h)
	} else {
		h := make([]float32, n)
		for i := range h {
			h[i] = float32(gen.NormFloat64())
		}
		dev.Write(buf, h)
	}
	return backend.View{Buf: buf, Shape: shape, Strides: backend.ContiguousStrides(shape)}
}
