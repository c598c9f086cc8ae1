// Package cpu is Forge's CPU backend: row-major float32/float64/int32 slices,
// matmul through BLAS (OpenBLAS on Linux, Accelerate on macOS, loaded with
// purego, no cgo) or a pure-Go blocked kernel where no BLAS loads, and every
// other kernel a fused loop parallelised over rows.
//
// Importing the package registers the backend under the name "cpu".
//
// # 16-bit floats
//
// Float16 and BFloat16 buffers hold bit patterns ([]uint16). The CPU
// stores, fills, reads, writes and converts them (Copy, rounding once to
// nearest even, package forge/half) but computes nothing in them: it is
// the float32/float64 reference, and every other kernel given a 16-bit
// view panics naming the kernel and the dtype.
//
// # Threads
//
// One pool is in charge at a time: Go kernels split rows over GOMAXPROCS
// goroutines, and BLAS runs with its own threads while Go waits for it.
// Two spinning pools on the same cores halve throughput.
//
// # Synchrony
//
// Every kernel runs to completion before it returns, so Sync is a no-op.
package cpu

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/half"
)

func init() {
	backend.Register("cpu", func() (backend.Backend, error) { return New(), nil })
}

// Backend is the CPU device. Its zero value is not usable; call New.
type Backend struct {
	backend.Unimplemented
	workers int

	// matmulPath is the matmul variant the last MatMul or MatMulMany
	// ran (Variant): the library's, or the Go kernel's for the products
	// goOverBLAS gives it. nil before the first.
	matmulPath atomic.Pointer[string]
}

// New returns a CPU backend using GOMAXPROCS workers.
func New() *Backend {
	b := &Backend{workers: runtime.GOMAXPROCS(0)}
	b.BackendName = "cpu"
	initBLAS()
	return b
}

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// Buffer is CPU memory: exactly one of the slices is non-nil. F16 and
// BF16 hold the bit patterns of Float16 and BFloat16 elements.
type Buffer struct {
	F32  []float32
	F64  []float64
	I32  []int32
	F16  []uint16
	BF16 []uint16

	// pooled: the memory came from the pool (allocPooled), which takes it
	// back on Free or, if it was never freed, when the cleanup runs.
	pooled  bool
	dt      uint8
	cleanup runtime.Cleanup
	// keep owns the memory of a buffer over host memory used in place
	// (AliasHost), which is read-only; nil otherwise.
	keep any
}

// Len returns the number of elements.
func (b *Buffer) Len() int {
	switch {
	case b.F32 != nil:
		return len(b.F32)
	case b.F64 != nil:
		return len(b.F64)
	case b.F16 != nil:
		return len(b.F16)
	case b.BF16 != nil:
		return len(b.BF16)
	}
	return len(b.I32)
}

// DType returns the element type.
func (b *Buffer) DType() backend.DType {
	switch {
	case b.F32 != nil:
		return backend.Float32
	case b.F64 != nil:
		return backend.Float64
	case b.F16 != nil:
		return backend.Float16
	case b.BF16 != nil:
		return backend.BFloat16
	}
	return backend.Int32
}

// u16 returns the bit-pattern slice of a Float16 or BFloat16 buffer (nil
// for other dtypes).
func (b *Buffer) u16() []uint16 {
	if b.F16 != nil {
		return b.F16
	}
	return b.BF16
}

// Alloc returns a buffer of n elements. Buffers of at least poolMinElems
// elements are recycled (pool.go): their contents are unspecified (zeros
// when new, stale values when recycled). Smaller ones are zeroed.
func (b *Backend) Alloc(dt backend.DType, n int) backend.Buffer {
	// A zero-length buffer still needs a non-nil slice to carry its dtype.
	c := max(n, 0)
	if c >= poolMinElems {
		switch dt {
		case backend.Float32:
			return allocPooled(uint8(dt), c, func() poolEntry { return poolEntry{f32: make([]float32, c)} })
		case backend.Float64:
			return allocPooled(uint8(dt), c, func() poolEntry { return poolEntry{f64: make([]float64, c)} })
		case backend.Int32:
			return allocPooled(uint8(dt), c, func() poolEntry { return poolEntry{i32: make([]int32, c)} })
		case backend.Float16, backend.BFloat16:
			return allocPooled(uint8(dt), c, func() poolEntry { return poolEntry{u16: make([]uint16, c)} })
		}
	}
	switch dt {
	case backend.Float32:
		return &Buffer{F32: make([]float32, c, max(c, 1))}
	case backend.Float64:
		return &Buffer{F64: make([]float64, c, max(c, 1))}
	case backend.Int32:
		return &Buffer{I32: make([]int32, c, max(c, 1))}
	case backend.Float16:
		return &Buffer{F16: make([]uint16, c, max(c, 1))}
	case backend.BFloat16:
		return &Buffer{BF16: make([]uint16, c, max(c, 1))}
	}
	panic(fmt.Sprintf("cpu: alloc: unknown dtype %v", dt))
}

// Memory reports the pooled-size buffers handed out (Live, Peak; shared
// by every CPU backend of the process, as the pool is) and the free lists
// (in Held).
func (b *Backend) Memory() backend.MemoryStats {
	live, peak := pool.memory()
	pool.mu.Lock()
	free := pool.bytes
	pool.mu.Unlock()
	return backend.MemoryStats{Live: live, Peak: peak, Held: live + free}
}

// ResetPeak starts Memory's peak again from the live bytes.
func (b *Backend) ResetPeak() { pool.resetPeak() }

// Recycle returns the buffers of unreachable tensors to the pool now
// (backend.Recycler): one garbage collection, then a short wait for its
// cleanups (pool.go).
func (b *Backend) Recycle() { pool.recycle() }

// Free returns the buffer's memory: a pooled buffer (at least
// poolMinElems elements) to the pool at once, a small one to the garbage
// collector.
func (b *Backend) Free(buf backend.Buffer) {
	if c, ok := buf.(*Buffer); ok {
		if c.pooled {
			c.pooled = false
			c.cleanup.Stop()
			e := poolEntry{f32: c.F32, f64: c.F64, i32: c.I32, u16: c.F16}
			if c.BF16 != nil {
				e.u16 = c.BF16
			}
			pool.release(c.dt, e)
		}
		c.F32, c.F64, c.I32 = c.F32[:0:0], c.F64[:0:0], c.I32[:0:0]
		c.F16, c.BF16 = c.F16[:0:0], c.BF16[:0:0]
		c.keep = nil
	}
}

// AliasHost returns a buffer whose slice is mem itself, reinterpreted as
// dt's elements (little-endian, as every CPU Forge runs on): no copy. mem
// must be aligned to dt's size. Nothing of the CPU backend writes the
// buffer unless a kernel is given it as a destination, which package
// forge refuses for a read-only tensor; Write panics. The buffer holds
// keep until it is freed or collected.
func (b *Backend) AliasHost(dt backend.DType, mem []byte, keep any) (backend.Buffer, error) {
	size := dt.Size()
	if len(mem) == 0 || len(mem)%size != 0 {
		return nil, fmt.Errorf("cpu: alias: %d bytes is not a whole number of %v elements", len(mem), dt)
	}
	p := unsafe.Pointer(unsafe.SliceData(mem))
	if uintptr(p)%uintptr(size) != 0 {
		return nil, fmt.Errorf("cpu: alias: the memory is not aligned to %v's %d bytes", dt, size)
	}
	n := len(mem) / size
	x := &Buffer{keep: keep}
	switch dt {
	case backend.Float32:
		x.F32 = unsafe.Slice((*float32)(p), n)
	case backend.Float64:
		x.F64 = unsafe.Slice((*float64)(p), n)
	case backend.Int32:
		x.I32 = unsafe.Slice((*int32)(p), n)
	case backend.Float16:
		x.F16 = unsafe.Slice((*uint16)(p), n)
	case backend.BFloat16:
		x.BF16 = unsafe.Slice((*uint16)(p), n)
	default:
		return nil, fmt.Errorf("cpu: alias: unknown dtype %v", dt)
	}
	return x, nil
}

// hostFits panics unless host is the host slice type of dt: []float32,
// []float64, []int32, or []uint16 (bit patterns) for Float16 and BFloat16.
func hostFits(op string, dt backend.DType, host any) {
	ok := false
	switch host.(type) {
	case []float32:
		ok = dt == backend.Float32
	case []float64:
		ok = dt == backend.Float64
	case []int32:
		ok = dt == backend.Int32
	case []uint16:
		ok = dt == backend.Float16 || dt == backend.BFloat16
	default:
		panic(fmt.Sprintf("cpu: %s: unsupported host type %T", op, host))
	}
	if !ok {
		panic(fmt.Sprintf("cpu: %s: host type %T does not match a %v buffer", op, host, dt))
	}
}

// Write copies host data into buf ([]uint16 bit patterns for Float16 and
// BFloat16).
func (b *Backend) Write(dst backend.Buffer, src any) {
	d := dst.(*Buffer)
	if d.keep != nil {
		panic("cpu: write: the buffer is host memory used in place (a mapped model file) and is read-only")
	}
	hostFits("write", d.DType(), src)
	switch s := src.(type) {
	case []float32:
		copy(d.F32, s)
	case []float64:
		copy(d.F64, s)
	case []int32:
		copy(d.I32, s)
	case []uint16:
		copy(d.u16(), s)
	}
	runtime.KeepAlive(d) // a pooled buffer must not be recycled during the copy
}

// Read copies buf's leading elements into dst ([]uint16 bit patterns for
// Float16 and BFloat16).
func (b *Backend) Read(src backend.Buffer, dst any) {
	s := src.(*Buffer)
	hostFits("read", s.DType(), dst)
	switch d := dst.(type) {
	case []float32:
		copy(d, s.F32)
	case []float64:
		copy(d, s.F64)
	case []int32:
		copy(d, s.I32)
	case []uint16:
		copy(d, s.u16())
	}
	runtime.KeepAlive(s)
}

// Sync is a no-op: CPU kernels finish before they return.
func (b *Backend) Sync() {}

// buf returns the CPU buffer of a view.
func buf(v backend.View) *Buffer { return v.Buf.(*Buffer) }

// f32 returns the float32 slice of v starting at its offset.
func f32(v backend.View) []float32 { return buf(v).F32[v.Offset:] }
func f64(v backend.View) []float64 { return buf(v).F64[v.Offset:] }
func i32(v backend.View) []int32   { return buf(v).I32[v.Offset:] }

// Float is the element constraint of the float kernels.
type Float interface{ ~float32 | ~float64 }

// isF32 reports whether T is float32 (as opposed to float64).
func isF32[T Float]() bool {
	var z T
	_, ok := any(z).(float32)
	return ok
}

// floats returns v's slice (from its offset) as []T; T must match the dtype.
func floats[T Float](v backend.View) []T {
	var z T
	switch any(z).(type) {
	case float32:
		return any(f32(v)).([]T)
	default:
		return any(f64(v)).([]T)
	}
}

func badDType(kernel string, dt backend.DType) string {
	if dt.IsHalf() {
		return fmt.Sprintf("cpu: %s: unsupported dtype %v%s", kernel, dt, halfHint)
	}
	return fmt.Sprintf("cpu: %s: unsupported dtype %v", kernel, dt)
}

// halfHint says what to do with 16-bit data on the CPU.
const halfHint = " (the CPU stores float16 and bfloat16 but computes only in float32 and float64: Cast to forge.Float32, or use a Metal device)"

// mismatch is the message of two dtypes a kernel cannot mix.
func mismatch(kernel string, a, b backend.DType) string {
	if a.IsHalf() {
		return badDType(kernel, a)
	}
	if b.IsHalf() {
		return badDType(kernel, b)
	}
	return fmt.Sprintf("cpu: %s: dtypes differ: %v and %v", kernel, a, b)
}

// noHalf panics with badDType if a view (with a buffer) is Float16 or
// BFloat16: the CPU stores and converts them but computes in none.
func noHalf(kernel string, views ...backend.View) {
	for _, v := range views {
		if v.Buf != nil && v.DType().IsHalf() {
			panic(badDType(kernel, v.DType()))
		}
	}
}

// ---------------------------------------------------------------------------
// Parallel loops

// minGrain is the smallest amount of work (in elements touched) worth
// handing to another goroutine.
const minGrain = 32 << 10

// parallelFor runs fn over [0, n) split into contiguous chunks, one per
// worker, using at most b.workers goroutines. cost is the approximate number
// of elements each index touches; small jobs run on the calling goroutine.
func (b *Backend) parallelFor(n, cost int, fn func(lo, hi int)) {
	parallelFor(b.workers, n, cost, fn)
}

func parallelFor(workers, n, cost int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	w := workers
	if total := n * max(cost, 1); total < 2*minGrain {
		w = 1
	} else if c := total / minGrain; c < w {
		w = c
	}
	if w > n {
		w = n
	}
	if w <= 1 {
		fn(0, n)
		return
	}
	chunk := (n + w - 1) / w
	fork((n+chunk-1)/chunk, func(p int) {
		lo := p * chunk
		fn(lo, min(lo+chunk, n))
	})
}

// parallelRows runs fn over [0, n) like parallelFor, for loops whose calls
// are independent of how [0, n) is cut (each index's result depends on
// that index only), but deals out short chunks, of about minGrain/2
// elements touched and at least four per worker, in order from a shared
// counter: the calling goroutine starts on them at once and a helper takes
// the next one whenever it runs. A helper goroutine can take tens of
// microseconds to be scheduled on an idle core (far longer in some virtual
// machines), and with one fixed half each the caller would wait that long
// for it; here the caller does the work the helper has not begun, so a
// short job costs no more than on one worker.
func (b *Backend) parallelRows(n, cost int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	cost = max(cost, 1)
	w := b.workers
	if total := n * cost; total < 2*minGrain {
		w = 1
	} else if c := total / minGrain; c < w {
		w = c
	}
	if w = min(w, n); w <= 1 {
		fn(0, n)
		return
	}
	chunk := max(1, min(minGrain/2/cost, n/(4*w)))
	chunks := int64((n + chunk - 1) / chunk)
	var next atomic.Int64
	run := func() {
		for k := next.Add(1) - 1; k < chunks; k = next.Add(1) - 1 {
			lo := int(k) * chunk
			fn(lo, min(lo+chunk, n))
		}
	}
	fork(w, func(int) { run() })
}

// ---------------------------------------------------------------------------
// Strided iteration

// layout describes k views of one shape for elementwise iteration: the
// shape with mergeable dimensions coalesced, and each view's strides and
// offset.
type layout struct {
	shape   []int   // coalesced shape, at least one dimension
	strides [][]int // strides[v][d]
	offsets []int   // offsets[v]
}

// newLayout coalesces the dimensions of views that all share shape (the
// first view's). Dimensions of size 1 are dropped and adjacent dimensions
// merged where every view's strides allow.
func newLayout(views ...backend.View) layout {
	c := backend.Coalesce(views...)
	return layout{shape: c.Shape, strides: c.Strides, offsets: c.Offsets}
}

// rows is the number of innermost runs: the product of all but the last
// coalesced dimension.
func (l layout) rows() int {
	n := 1
	for _, d := range l.shape[:len(l.shape)-1] {
		n *= d
	}
	return n
}

// inner is the length of the innermost run.
func (l layout) inner() int { return l.shape[len(l.shape)-1] }

// innerStride returns view v's stride along the innermost dimension.
func (l layout) innerStride(v int) int { return l.strides[v][len(l.shape)-1] }

// forRows calls fn(offs) for each innermost run r in [lo, hi) with offs[v]
// the offset of view v's first element of that run. offs is reused between
// calls.
func (l layout) forRows(lo, hi int, fn func(offs []int)) {
	outer := l.shape[:len(l.shape)-1]
	k := len(l.offsets)
	idx := make([]int, len(outer))
	offs := make([]int, k)
	// Decompose lo into a multi-index.
	r := lo
	for d := len(outer) - 1; d >= 0; d-- {
		idx[d] = r % outer[d]
		r /= outer[d]
	}
	for v := 0; v < k; v++ {
		offs[v] = l.offsets[v]
		for d := range outer {
			offs[v] += idx[d] * l.strides[v][d]
		}
	}
	for r := lo; r < hi; r++ {
		fn(offs)
		// Odometer increment.
		for d := len(outer) - 1; d >= 0; d-- {
			idx[d]++
			for v := 0; v < k; v++ {
				offs[v] += l.strides[v][d]
			}
			if idx[d] < outer[d] {
				break
			}
			for v := 0; v < k; v++ {
				offs[v] -= l.strides[v][d] * outer[d]
			}
			idx[d] = 0
		}
	}
}

// each runs fn over all innermost runs of the layout, in parallel.
// fn receives the offsets of each view and the run length n; view v's
// element j of the run is at offs[v] + j*l.innerStride(v).
func (b *Backend) each(l layout, fn func(offs []int, n int)) {
	n := l.inner()
	b.parallelFor(l.rows(), n*len(l.offsets), func(lo, hi int) {
		l.forRows(lo, hi, func(offs []int) { fn(offs, n) })
	})
}

// Fill sets every element of dst to v.
func (b *Backend) Fill(dst backend.View, v float64) {
	l := newLayout(dst)
	s := l.innerStride(0)
	switch dst.DType() {
	case backend.Float32:
		d, x := buf(dst).F32, float32(v)
		b.each(l, func(o []int, n int) {
			if s == 1 && v == 0 && !math.Signbit(v) {
				clear(d[o[0] : o[0]+n]) // memclr: vector stores
				return
			}
			for j, p := 0, o[0]; j < n; j, p = j+1, p+s {
				d[p] = x
			}
		})
	case backend.Float64:
		d := buf(dst).F64
		b.each(l, func(o []int, n int) {
			for j, p := 0, o[0]; j < n; j, p = j+1, p+s {
				d[p] = v
			}
		})
	case backend.Int32:
		d, x := buf(dst).I32, int32(v)
		b.each(l, func(o []int, n int) {
			for j, p := 0, o[0]; j < n; j, p = j+1, p+s {
				d[p] = x
			}
		})
	case backend.Float16, backend.BFloat16:
		// v rounds once, from float64, to the 16-bit format.
		x := half.Float16BitsFrom64(v)
		if dst.DType() == backend.BFloat16 {
			x = half.BFloat16BitsFrom64(v)
		}
		d := buf(dst).u16()
		b.each(l, func(o []int, n int) {
			for j, p := 0, o[0]; j < n; j, p = j+1, p+s {
				d[p] = x
			}
		})
	default:
		panic(badDType("fill", dst.DType()))
	}
}

// Copy copies src into dst (same shape), converting dtypes: a float to
// int32 truncates toward zero; a value to Float16 or BFloat16 rounds once
// to nearest even (±Inf past the largest finite value, NaN stays NaN);
// every other conversion is exact (16-bit floats widen exactly) or rounds
// to nearest as Go's conversions do.
func (b *Backend) Copy(dst, src backend.View) {
	l := newLayout(dst, src)
	sd, ss := l.innerStride(0), l.innerStride(1)
	db, sb := buf(dst), buf(src)
	switch {
	case db.F32 != nil && sb.F32 != nil:
		copyRuns(b, l, db.F32, sb.F32, sd, ss)
	case db.F64 != nil && sb.F64 != nil:
		copyRuns(b, l, db.F64, sb.F64, sd, ss)
	case db.I32 != nil && sb.I32 != nil:
		copyRuns(b, l, db.I32, sb.I32, sd, ss)
	case db.F16 != nil && sb.F16 != nil:
		copyRuns(b, l, db.F16, sb.F16, sd, ss)
	case db.BF16 != nil && sb.BF16 != nil:
		copyRuns(b, l, db.BF16, sb.BF16, sd, ss)
	// The casts of mixed precision, without the float64 detour.
	case db.F16 != nil && sb.F32 != nil:
		convertRuns(b, l, db.F16, sb.F32, sd, ss, half.Float16Bits)
	case db.BF16 != nil && sb.F32 != nil:
		convertRuns(b, l, db.BF16, sb.F32, sd, ss, half.BFloat16Bits)
	case db.F32 != nil && sb.F16 != nil:
		convertRuns(b, l, db.F32, sb.F16, sd, ss, half.Float16FromBits)
	case db.F32 != nil && sb.BF16 != nil:
		convertRuns(b, l, db.F32, sb.BF16, sd, ss, half.BFloat16FromBits)
	default:
		// Dtype conversion: go through float64, which holds every int32,
		// float32 and 16-bit float exactly (so a 16-bit result is rounded
		// once).
		get := getter(sb)
		set := setter(db)
		b.each(l, func(o []int, n int) {
			for j := 0; j < n; j++ {
				set(o[0]+j*sd, get(o[1]+j*ss))
			}
		})
	}
}

// convertRuns copies s into d through conv, run by run.
func convertRuns[D, S any](b *Backend, l layout, d []D, s []S, sd, ss int, conv func(S) D) {
	b.each(l, func(o []int, n int) {
		for j, p, q := 0, o[0], o[1]; j < n; j, p, q = j+1, p+sd, q+ss {
			d[p] = conv(s[q])
		}
	})
}

func copyRuns[T float32 | float64 | int32 | uint16](b *Backend, l layout, d, s []T, sd, ss int) {
	b.each(l, func(o []int, n int) {
		if sd == 1 && ss == 1 {
			copy(d[o[0]:o[0]+n], s[o[1]:o[1]+n])
			return
		}
		for j, p, q := 0, o[0], o[1]; j < n; j, p, q = j+1, p+sd, q+ss {
			d[p] = s[q]
		}
	})
}

func getter(b *Buffer) func(int) float64 {
	switch {
	case b.F32 != nil:
		return func(i int) float64 { return float64(b.F32[i]) }
	case b.F64 != nil:
		return func(i int) float64 { return b.F64[i] }
	case b.F16 != nil:
		return func(i int) float64 { return float64(half.Float16FromBits(b.F16[i])) }
	case b.BF16 != nil:
		return func(i int) float64 { return float64(half.BFloat16FromBits(b.BF16[i])) }
	}
	return func(i int) float64 { return float64(b.I32[i]) }
}

func setter(b *Buffer) func(int, float64) {
	switch {
	case b.F32 != nil:
		return func(i int, v float64) { b.F32[i] = float32(v) }
	case b.F64 != nil:
		return func(i int, v float64) { b.F64[i] = v }
	case b.F16 != nil:
		return func(i int, v float64) { b.F16[i] = half.Float16BitsFrom64(v) }
	case b.BF16 != nil:
		return func(i int, v float64) { b.BF16[i] = half.BFloat16BitsFrom64(v) }
	}
	return func(i int, v float64) { b.I32[i] = int32(v) }
}
