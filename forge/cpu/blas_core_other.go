//go:build !amd64 || purego

package cpu

// cpuFeatures knows nothing of CPUs other than x86-64: OpenBLAS keeps its
// own choice of kernels there (on arm64 it chooses by the CPU's part
// number; see blas_core.go).
func cpuFeatures() cpuInfo { return cpuInfo{} }
