package profile

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/forgeml/forge/forge"
)

// Record is one kernel call as the dispatch point reported it, with the
// forge.Scope path it ran in (Scope; "" outside every scope).
type Record struct {
	forge.KernelCall
}

// Span is an interval of host time: a forge.Scope (Name is its full path)
// or a host phase timed by TimeHost (Name is the phase, e.g. "data").
type Span struct {
	Name     string
	Start    time.Time
	Duration time.Duration
}

// Profile is what a recording saw: every kernel call, the host spans and
// scopes, and the wall time of the whole recording.
//
// Iterations is how many times the profiled work ran (RunN); reports divide
// totals and call counts by it, so they read per iteration (per step).
type Profile struct {
	Start      time.Time     // when the recording began
	Wall       time.Duration // wall time from Start to the end of the recording
	Iterations int           // repetitions of the profiled work (≥ 1)
	Records    []Record      // kernel calls in the order they were reported
	Spans      []Span        // host phases timed with TimeHost (e.g. "data")
	Scopes     []Span        // scopes entered with forge.Scope, by full path, in order of ending
}

// FromCalls builds a profile out of kernel calls made elsewhere (an
// observer of your own, or a test with known durations).
// The recording is taken to begin at start and last wall.
func FromCalls(start time.Time, wall time.Duration, calls ...forge.KernelCall) *Profile {
	p := &Profile{Start: start, Wall: wall, Iterations: 1}
	for _, c := range calls {
		p.Records = append(p.Records, Record{KernelCall: c})
	}
	return p
}

// KernelTime is the sum of the recorded kernel durations.
func (p *Profile) KernelTime() time.Duration {
	var d time.Duration
	for _, r := range p.Records {
		d += r.Duration
	}
	return d
}

// Outside is the time spent outside kernels (framework overhead on the
// host: graph recording, allocation, Go code between kernels):
// Wall − KernelTime.
func (p *Profile) Outside() time.Duration { return p.Wall - p.KernelTime() }

// Recorder records kernel calls between Start and Stop.
type Recorder struct {
	mu      sync.Mutex
	p       *Profile
	chunks  [][]Record // kernel records in chunks: appending never copies old ones
	prev    forge.Observer
	prevH   hostObserver
	stopped bool
}

// Start begins recording every kernel call, forge.Scope and TimeHost until
// Stop: it installs one forge.Observer for the kernels and the scopes.
// Observers installed before are called in turn (chained) and restored by
// Stop. Recordings may nest; stop them in the reverse order of starting.
func Start() *Recorder {
	r := &Recorder{p: &Profile{Iterations: 1}}
	r.prev = forge.SetObserver(forge.Observer{Kernel: r.kernel, Scope: r.scope})
	r.prevH = setHostObserver(r.host)
	r.p.Start = time.Now()
	return r
}

func (r *Recorder) kernel(k forge.KernelCall) {
	r.mu.Lock()
	if n := len(r.chunks); n == 0 || len(r.chunks[n-1]) == cap(r.chunks[n-1]) {
		size := 64 // chunks double up to maxChunk: small recordings stay small
		if n > 0 {
			size = min(2*cap(r.chunks[n-1]), maxChunk)
		}
		r.chunks = append(r.chunks, make([]Record, 0, size))
	}
	last := &r.chunks[len(r.chunks)-1]
	*last = append(*last, Record{KernelCall: k})
	r.mu.Unlock()
	if r.prev.Kernel != nil {
		r.prev.Kernel(k)
	}
}

// scope records s, unless the recording has stopped meanwhile (the scope
// began while it ran).
func (r *Recorder) scope(s forge.ScopeSpan) {
	r.mu.Lock()
	if !r.stopped {
		r.p.Scopes = append(r.p.Scopes, Span{Name: s.Path, Start: s.Start, Duration: s.Duration})
	}
	r.mu.Unlock()
	if r.prev.Scope != nil {
		r.prev.Scope(s)
	}
}

func (r *Recorder) host(s Span) {
	r.mu.Lock()
	r.p.Spans = append(r.p.Spans, s)
	r.mu.Unlock()
	if r.prevH != nil {
		r.prevH(s)
	}
}

// Stop ends the recording, restores the observers found by Start and
// returns the profile. Calling it again returns the same profile.
func (r *Recorder) Stop() *Profile {
	end := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return r.p
	}
	r.stopped = true
	forge.SetObserver(r.prev)
	setHostObserver(r.prevH)
	r.p.Wall = end.Sub(r.p.Start)
	n := 0
	for _, c := range r.chunks {
		n += len(c)
	}
	r.p.Records = make([]Record, 0, n)
	for _, c := range r.chunks {
		r.p.Records = append(r.p.Records, c...)
	}
	r.chunks = nil
	return r.p
}

// maxChunk is the most records per chunk of a recording (~650 KB).
const maxChunk = 4096

// Run records every kernel fn launches and returns the profile.
//
//	p := profile.Run(func() { trainer.Step() })
//	fmt.Println(p.Report(profile.ReportOptions{Top: 10}))
func Run(fn func()) *Profile { return RunN(1, fn) }

// RunN runs fn n times in one recording; its reports are per run of fn.
func RunN(n int, fn func()) *Profile {
	r := Start()
	defer r.Stop()
	for range n {
		fn()
	}
	p := r.Stop()
	p.Iterations = max(n, 1)
	return p
}

// hostObserver receives host spans.
type hostObserver func(Span)

var hostObs atomic.Pointer[hostObserver]

func setHostObserver(h hostObserver) hostObserver {
	var p *hostObserver
	if h != nil {
		p = &h
	}
	old := hostObs.Swap(p)
	if old == nil {
		return nil
	}
	return *old
}

// TimeHost runs fn, host work that launches no kernels (loading a batch,
// tokenising), and records its wall time as the host phase named phase.
// Reports list such phases next to forward, backward and optimizer, and
// traces show them on the host track. Outside a recording it only calls fn.
func TimeHost(phase string, fn func()) {
	h := hostObs.Load()
	if h == nil {
		fn()
		return
	}
	start := time.Now()
	defer func() { (*h)(Span{Name: phase, Start: start, Duration: time.Since(start)}) }()
	fn()
}

// sortedSpans returns spans ordered by start time.
func sortedSpans(s []Span) []Span {
	s = slices.Clone(s)
	slices.SortStableFunc(s, func(a, b Span) int { return a.Start.Compare(b.Start) })
	return s
}
