// Package scope holds the label that the profiler stamps onto kernel
// records: a stack of names joined with "/" ("blocks.3/attn"), pushed and
// popped by Do.
//
// It is a leaf package (it imports nothing of Forge's) so that model code
// such as forge/gpt can mark its layers without importing forge/profile,
// which itself imports the training packages for its step benchmark. Users
// call profile.Scope, which is Do.
//
// While no profiler listens (no observer installed), Do only calls fn: the
// label is not built and nothing is timed.
//
// The label is process-wide, like forge's graph recording and phase: mark
// scopes from the goroutine that launches the kernels. A record carries the
// label current when the kernel observer runs, which on the CPU is right
// after the kernel, in the launching goroutine.
package scope

import (
	"strconv"
	"sync/atomic"
	"time"
)

// Observer receives each finished scope: its full path, when it began and
// how long it lasted (wall time).
type Observer func(path string, start time.Time, d time.Duration)

var (
	current  atomic.Pointer[string]
	observer atomic.Pointer[Observer]
)

// Do runs fn with name pushed onto the scope stack, so that Current
// returns the enclosing path + "/" + name inside fn. Without an observer it
// only calls fn.
func Do(name string, fn func()) {
	obs := observer.Load()
	if obs == nil {
		fn()
		return
	}
	do(obs, name, fn)
}

// Indexed is Do with the name prefix + "." + i ("blocks.3"), built only
// while an observer listens, so a model loop pays nothing otherwise.
func Indexed(prefix string, i int, fn func()) {
	obs := observer.Load()
	if obs == nil {
		fn()
		return
	}
	do(obs, prefix+"."+strconv.Itoa(i), fn)
}

func do(obs *Observer, name string, fn func()) {
	prev := current.Load()
	path := name
	if prev != nil && *prev != "" {
		path = *prev + "/" + name
	}
	current.Store(&path)
	start := time.Now()
	defer func() {
		d := time.Since(start)
		current.Store(prev)
		(*obs)(path, start, d)
	}()
	fn()
}

// Current returns the scope path in effect ("" outside every scope).
func Current() string {
	if p := current.Load(); p != nil {
		return *p
	}
	return ""
}

// SetObserver installs obs (nil removes it) and returns the previous one,
// which a new observer should call in turn (chaining), and restore when it
// is done.
func SetObserver(obs Observer) Observer {
	var p *Observer
	if obs != nil {
		p = &obs
	}
	old := observer.Swap(p)
	if old == nil {
		return nil
	}
	return *old
}
