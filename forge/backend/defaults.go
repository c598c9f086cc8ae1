package backend

import (
	"errors"
	"time"
)

// The services of Backend that have a default: a backend embedding
// Unimplemented gets these and overrides the ones it provides. Every
// other method of Unimplemented is generated into unimplemented.go and
// panics with ErrNotImplemented.

// Flush does nothing: the backend runs kernels as they are called.
func (Unimplemented) Flush() {}

// Recycle does nothing: the backend frees memory itself.
func (Unimplemented) Recycle() {}

// Describe returns "": the backend says nothing beyond its name.
func (Unimplemented) Describe() string { return "" }

// Variant returns "": the backend has one path per kernel.
func (Unimplemented) Variant(string) string { return "" }

// TimeKernels runs launch and reports that it did not time it (the caller
// measures wall time).
func (Unimplemented) TimeKernels(launch func()) (time.Duration, bool) {
	launch()
	return 0, false
}

// Memory returns zeros: the backend does not count its memory.
func (Unimplemented) Memory() MemoryStats { return MemoryStats{} }

// ResetPeak does nothing.
func (Unimplemented) ResetPeak() {}

// Concurrent does nothing: kernels run in the order they are called.
func (Unimplemented) Concurrent(bool) {}

// ErrNoAlias is AliasHost's default error.
var ErrNoAlias = errors.New("the device cannot use host memory in place")

// AliasHost returns ErrNoAlias: the caller copies.
func (Unimplemented) AliasHost(DType, []byte, any) (Buffer, error) { return nil, ErrNoAlias }
