package metal

// Concurrent-dispatch regions (backend.Backend.Concurrent, forge.Independent).
//
// A serial compute encoder orders every dispatch after the one before it,
// which leaves the GPU idle between the optimizer's ~100 small independent
// kernels. Between Concurrent(true) and Concurrent(false) the stream puts
// the dispatches it encodes into a concurrent region of the command buffer
// (driver.ConcurrentCommandBuffer) instead. The hint never changes a
// result: each dispatch's accesses — the byte range of every buffer
// argument, and whether the kernel may write it (from its MSL signature: a
// `device` pointer or reference that is not const) — are checked against
// those of the region's earlier dispatches, and where the two overlap and
// either writes, a barrier goes in first. A kernel the signature table
// does not know writes every buffer it binds.

import (
	"sort"
	"strings"
	"sync"

	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/driver"
	"github.com/forgeml/forge/metal/emu"
)

// access is one buffer range a dispatch binds.
type access struct {
	buf    driver.Buffer
	lo, hi int // byte range [lo, hi) in buf
	write  bool
}

func (a access) conflicts(b access) bool {
	return a.buf == b.buf && (a.write || b.write) && a.lo < b.hi && b.lo < a.hi
}

// region is the stream's concurrent-region state.
type region struct {
	want bool // between Concurrent(true) and Concurrent(false)
	open bool // a region is open in the current command buffer
	acc  []access
	// deferred are dispatches that depend on earlier ones of the region
	// and on which nothing encoded since depends (a two-pass reduction's
	// second pass): encoded together after one barrier when the region
	// ends, when a later dispatch touches their memory, or at commit, so
	// that their first passes run concurrently. Each owns a scratch
	// buffer freed once it is encoded.
	deferred []deferredDispatch
}

type deferredDispatch struct {
	d       dispatch
	scratch *Buffer
}

// RegionStats counts the concurrent regions the stream encoded.
type RegionStats struct {
	Regions    int64 // concurrent regions begun
	Dispatches int64 // dispatches encoded inside one
	Barriers   int64 // barriers put in because a dispatch depended on an earlier one of its region
	Deferred   int64 // dispatches deferred to the end of a region (deferLocked)
}

// Concurrent starts (on) or ends a run of independent kernels (see the
// file comment). A driver without concurrent regions ignores it.
func (b *Backend) Concurrent(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !on {
		b.endRegionLocked() // the deferred dispatches still go into the region
	}
	b.stream.region.want = on
}

// endRegionLocked encodes the deferred dispatches and ends the open
// region, if any.
func (b *Backend) endRegionLocked() {
	b.flushDeferredLocked()
	s := &b.stream
	if s.region.open {
		s.cur.(driver.ConcurrentCommandBuffer).EndConcurrent()
	}
	s.resetRegion()
}

// resetRegion forgets the region's accesses (after it ended or its
// command buffer was committed, which ends it).
func (s *stream) resetRegion() {
	s.region.open = false
	clear(s.region.acc)
	s.region.acc = s.region.acc[:0]
}

// inRegionLocked reports whether dispatches now go into an open
// concurrent region.
func (b *Backend) inRegionLocked() bool {
	return b.stream.region.open && b.stream.cur != nil && !b.stream.profile
}

// deferLocked encodes d — which reads what the region's earlier
// dispatches wrote — when the region's dispatches are done, freeing
// scratch then; outside a region it encodes d now and frees scratch.
func (b *Backend) deferLocked(d dispatch, scratch *Buffer) {
	if !b.inRegionLocked() {
		b.encodeLocked(d)
		b.freeLocked(scratch)
		return
	}
	for _, a := range d.args {
		if a.blk != nil {
			a.blk.use = b.stream.serial // held until encoded, in this command buffer
		}
	}
	b.stream.region.deferred = append(b.stream.region.deferred, deferredDispatch{d, scratch})
	b.stream.rst.Deferred++
}

// flushDeferredLocked encodes the deferred dispatches (into the open
// region: the first one's dependence puts the barrier in) and frees their
// scratch buffers.
func (b *Backend) flushDeferredLocked() {
	r := &b.stream.region
	if len(r.deferred) == 0 {
		return
	}
	ds := r.deferred
	r.deferred = nil
	for _, x := range ds {
		b.encodeLocked(x.d)
		b.freeLocked(x.scratch)
	}
}

// enterRegionLocked is called before a dispatch of kernel with args is
// encoded into s.cur: inside Concurrent it opens a region if none is
// open, or puts a barrier in when the dispatch touches memory an earlier
// one of the region wrote or writes memory one read. A dispatch that
// touches a deferred one's memory first has the deferred ones encoded.
func (b *Backend) enterRegionLocked(kernel string, args []kernelArg) {
	s := &b.stream
	if !s.region.want || s.profile {
		return
	}
	cc, ok := s.cur.(driver.ConcurrentCommandBuffer)
	if !ok {
		return
	}
	writes := kernelWrites(kernel)
	mine := make([]access, 0, len(args))
	for i, a := range args {
		if a.drv.Buf == nil || a.hi <= a.lo {
			continue
		}
		w := true
		if writes != nil {
			w = i < len(writes) && writes[i]
		}
		mine = append(mine, access{a.drv.Buf, a.lo, a.hi, w})
	}
	if len(s.region.deferred) > 0 && touchesDeferred(mine, s.region.deferred) {
		b.flushDeferredLocked() // which re-enters here for each
	}
	if !s.region.open {
		cc.BeginConcurrent()
		s.region.open = true
		s.rst.Regions++
	} else {
		for _, m := range mine {
			if conflictsAny(m, s.region.acc) {
				cc.Barrier()
				s.rst.Barriers++
				clear(s.region.acc)
				s.region.acc = s.region.acc[:0]
				break
			}
		}
	}
	s.region.acc = append(s.region.acc, mine...)
	s.rst.Dispatches++
}

// touchesDeferred reports whether accesses conflict with a deferred
// dispatch's.
func touchesDeferred(acc []access, ds []deferredDispatch) bool {
	writes := map[string][]bool{}
	for _, x := range ds {
		w, ok := writes[x.d.kernel]
		if !ok {
			w = kernelWrites(x.d.kernel)
			writes[x.d.kernel] = w
		}
		for i, a := range x.d.args {
			if a.drv.Buf == nil || a.hi <= a.lo {
				continue
			}
			da := access{a.drv.Buf, a.lo, a.hi, w == nil || i < len(w) && w[i]}
			if conflictsAny(da, acc) {
				return true
			}
		}
	}
	return false
}

func conflictsAny(a access, acc []access) bool {
	for _, b := range acc {
		if a.conflicts(b) {
			return true
		}
	}
	return false
}

// RegionStats returns the counts of concurrent regions so far.
func (b *Backend) RegionStats() RegionStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stream.rst
}

// kernelWrites returns, for the kernel function named kernel, whether
// each [[buffer(i)]] may be written by it (a non-const device pointer or
// reference), or nil if the embedded sources do not declare it.
func kernelWrites(kernel string) []bool {
	sigOnce.Do(loadSignatures)
	return sigWrites[kernel]
}

var (
	sigOnce   sync.Once
	sigWrites map[string][]bool
)

// loadSignatures reads every kernel's parameters from the embedded
// sources (with the emulator's MSL parser, which launches the same
// kernels: one reading of the signatures for both). A file it cannot
// parse leaves its kernels unknown, which is safe: they write everything.
func loadSignatures() {
	sigWrites = map[string][]bool{}
	src := kernels.Sources()
	files := make([]string, 0, len(src))
	for f := range src {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		ks, err := emu.ParseKernels(f, src[f])
		if err != nil {
			continue
		}
		for _, k := range ks {
			sigWrites[k.Name] = paramWrites(k.Params)
		}
	}
}

// paramWrites is kernelWrites of one parameter list.
func paramWrites(params []emu.Param) []bool {
	var w []bool
	for _, p := range params {
		if p.BufferIndex < 0 {
			continue
		}
		for len(w) <= p.BufferIndex {
			w = append(w, false)
		}
		w[p.BufferIndex] = p.AddressSpace == "device" && (p.Pointer || p.Ref) && !isConst(p.Type)
	}
	return w
}

// isConst reports whether a parameter type as written ("device const
// float*", "const device half*") is const-qualified in what it points to.
// A const after the * or & ("device float* const") qualifies the pointer,
// not the memory.
func isConst(t string) bool {
	if i := strings.IndexAny(t, "*&"); i >= 0 {
		t = t[:i]
	}
	for _, f := range strings.Fields(t) {
		if f == "const" {
			return true
		}
	}
	return false
}
