//go:build !(amd64 || arm64) || purego

package fmapeak

// vectorKernels: no assembly for this platform (or the purego build):
// only the portable Go loop, which Kernels appends.
func vectorKernels() []Kernel { return nil }
