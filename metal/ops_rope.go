package metal

// RoPE and RoPEStrided (backend.KernelRoPEStrided) (kernels/rope.metal). The
// cos/sin tables are computed on the host in float64, exactly as the CPU
// backend computes its angles, rounded to float32 and kept per backend: a
// table per (D, θ) covering positions 0 … P−1 (or a far range of its own,
// see ropeFarStart), grown (doubling) when a call needs the positions just
// past it, so a training step reuses one table and KV-cached decoding
// grows it rarely. At most ropeCacheSize tables per backend are kept (least
// recently used out).
//
// x and y are float32, float16 or bfloat16 (one dtype; rope_f32, rope_f16,
// rope_bf16): a 16-bit x is widened, rotated in float32 with the same
// float32 table, and y rounded once.

import (
	"fmt"
	"math"
	"sync"

	"github.com/forgeml/forge/forge/backend"
)

var (
	kRoPEBy           = namesByDType("rope")
	kRoPE             = kRoPEBy[backend.Float32] // the op's name in panics
	ropeInverseLabels = withSuffix(kRoPEBy, ".inverse")
)

// ropeParams mirrors RopeParams in kernels/rope.metal.
type ropeParams struct {
	N, HalfDim, T, P0 uint32
	Sign              float32
	NDim              uint32
	Shape             [maxDims]uint32
	Strides           [maxDims]int32
}

// ropeTable holds (cos φ, sin φ) as float32 pairs for positions start …
// start+n−1 and the D/2 frequencies of (d, theta), (n, D/2, 2) in buf.
type ropeTable struct {
	d        int
	theta    float64
	start, n int
	buf      backend.Buffer
	lastUse  uint64
	owner    *Backend
}

// ropeTables is the per-backend table cache (the Backend struct is shared
// with the other ops; the cache lives here). The lock is held for the whole
// of a RoPE call, so a table is never freed between lookup and launch (and
// Free defers reuse until the command buffers using it complete).
var ropeTables ropeCache

type ropeCache struct {
	sync.Mutex
	clock  uint64
	tables []*ropeTable
}

// ropeCacheSize bounds the tables kept per backend; ropeFarStart is the
// first position from which a new table starts at the positions asked for
// rather than at 0.
const (
	ropeCacheSize = 8
	ropeFarStart  = 1 << 16
)

// ropeTableFor returns a table of (d, theta) covering positions lo … hi−1.
// Called with ropeTables locked.
func (b *Backend) ropeTableFor(d int, theta float64, lo, hi int) *ropeTable {
	ropeTables.clock++
	var old *ropeTable
	mine := 0
	for _, tb := range ropeTables.tables {
		if tb.owner != b {
			continue
		}
		mine++
		if tb.d != d || tb.theta != theta {
			continue
		}
		if tb.start <= lo && hi <= tb.start+tb.n {
			tb.lastUse = ropeTables.clock
			return tb
		}
		if tb.start <= lo && lo <= tb.start+2*tb.n {
			old = tb // the positions just past it: grow it
		}
	}
	// A new table starts at position 0 (or lo when lo is negative), unless
	// lo is far out: then at lo, so that a table never holds much more than
	// twice the positions asked for.
	start, end := min(lo, 0), hi
	if lo > ropeFarStart {
		start = lo
	}
	if old != nil { // grow: keep the old range, at least double it
		start = old.start
		end = max(end, old.start+2*old.n)
		ropeTables.drop(old)
	} else if mine >= ropeCacheSize {
		var lru *ropeTable
		for _, tb := range ropeTables.tables {
			if tb.owner == b && (lru == nil || tb.lastUse < lru.lastUse) {
				lru = tb
			}
		}
		ropeTables.drop(lru)
	}
	n := end - start
	n = (n + 63) / 64 * 64
	half := d / 2
	checkCount(kRoPE, 2*n*half)
	host := make([]float32, 2*n*half)
	for k := 0; k < half; k++ {
		f := math.Pow(theta, -float64(2*k)/float64(d)) // θ^(−2k/D), as the CPU
		for t := 0; t < n; t++ {
			sn, cs := math.Sincos(float64(start+t) * f)
			host[2*(t*half+k)] = float32(cs)
			host[2*(t*half+k)+1] = float32(sn)
		}
	}
	buf := b.Alloc(backend.Float32, len(host))
	b.Write(buf, host)
	tb := &ropeTable{d: d, theta: theta, start: start, n: n, buf: buf, lastUse: ropeTables.clock, owner: b}
	ropeTables.tables = append(ropeTables.tables, tb)
	return tb
}

// drop removes tb from the cache and frees its buffer (its memory is
// reused only after the command buffers that read it complete).
func (c *ropeCache) drop(tb *ropeTable) {
	for i, t := range c.tables {
		if t == tb {
			c.tables = append(c.tables[:i], c.tables[i+1:]...)
			break
		}
	}
	tb.owner.Free(tb.buf)
}

// RoPE rotates the interleaved pairs of x (N, T, D), contiguous float32,
// float16 or bfloat16, into y (contiguous, x's dtype; it may be x) by
// (pos0+t)·theta^(−2k/D), or by the negative angle when inverse.
func (b *Backend) RoPE(y, x backend.View, pos0 int, theta float64, inverse bool) {
	if !x.IsContiguous() {
		panic(fmt.Sprintf("metal: %s: x %v with strides %v is not contiguous", kRoPE, x.Shape, x.Strides))
	}
	b.rope(y, x, pos0, theta, inverse)
}

// RoPEStrided is RoPE for an x (…, T, D) of rank ≥ 2 whose last axis is
// contiguous and whose other axes have any strides; y is contiguous.
func (b *Backend) RoPEStrided(y, x backend.View, pos0 int, theta float64, inverse bool) {
	r := len(x.Shape)
	if r < 2 || (x.Strides[r-1] != 1 && x.Shape[r-1] > 1) {
		panic(fmt.Sprintf("metal: %s: x %v with strides %v needs rank ≥ 2 and contiguous rows", kRoPE, x.Shape, x.Strides))
	}
	b.rope(y, x, pos0, theta, inverse)
}

func (b *Backend) rope(y, x backend.View, pos0 int, theta float64, inverse bool) {
	dt := floatDType(kRoPE, y, x)
	kernel := kRoPEBy[dt]
	if !y.IsContiguous() {
		panic(fmt.Sprintf("metal: %s: y %v with strides %v is not contiguous", kernel, y.Shape, y.Strides))
	}
	r := len(x.Shape)
	d, t := 1, 1
	if r >= 1 {
		d = x.Shape[r-1]
	}
	if r >= 2 {
		t = x.Shape[r-2]
	}
	if d%2 != 0 {
		panic(fmt.Sprintf("metal: %s: head dimension %d is odd (shape %v)", kernel, d, x.Shape))
	}
	if t == 0 || d == 0 || x.Numel() == 0 {
		return
	}
	n := x.Numel()
	checkCount(kernel, n)
	rows := backend.View{Offset: x.Offset, Shape: x.Shape[:max(r-1, 0)], Strides: x.Strides[:max(r-1, 0)]}
	l := coalesce(rows)
	if len(l.shape) > maxDims {
		// More row axes than the kernel indexes: rotate a contiguous copy.
		cv, free := b.contiguous(x)
		defer free()
		b.rope(y, cv, pos0, theta, inverse)
		return
	}
	// The row axes' offsets plus the row itself (D elements).
	span := d - 1
	for i, s := range l.strides[0] {
		span += absInt(s) * (l.shape[i] - 1)
	}
	if span > math.MaxInt32 {
		panic(fmt.Sprintf("metal: %s: x spans %d elements, beyond the kernel's int32 offsets", kernel, span))
	}
	half := d / 2
	p := ropeParams{N: uint32(n / 2), HalfDim: uint32(half), T: uint32(t), Sign: 1, NDim: uint32(len(l.shape))}
	if inverse {
		p.Sign = -1
	}
	l.dimsArgs(kernel, &p.Shape, &p.Strides)

	ropeTables.Lock()
	defer ropeTables.Unlock()
	tb := b.ropeTableFor(d, theta, pos0, pos0+t)
	p.P0 = uint32(pos0 - tb.start)
	label := kernel
	if inverse {
		label = ropeInverseLabels[dt]
	}
	b.runEW(label, pkey(kernel, cBool(0, len(l.shape) == 1)), n/2, b.arg(y), b.arg(backend.View{Buf: x.Buf, Offset: x.Offset}),
		b.arg(backend.View{Buf: tb.buf}), bytesArg(p))
}
