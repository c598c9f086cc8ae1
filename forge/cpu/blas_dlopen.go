//go:build darwin || linux || freebsd || netbsd

package cpu

import (
	"errors"

	"github.com/ebitengine/purego"
)

// openBLAS dlopens path and looks up sgemm_ and dgemm_. An OpenBLAS (found
// by its openblas_set_num_threads symbol, whatever the file is called) is
// set to one thread: Go splits the work (see blas.go).
func openBLAS(path string) (*blasLibrary, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, err
	}
	lib := &blasLibrary{name: "blas", path: path}
	if lib.sgemm, err = purego.Dlsym(h, "sgemm_"); err != nil {
		return nil, errors.New("no sgemm_ symbol")
	}
	if lib.dgemm, err = purego.Dlsym(h, "dgemm_"); err != nil {
		return nil, errors.New("no dgemm_ symbol")
	}
	if set, err := purego.Dlsym(h, "openblas_set_num_threads"); err == nil && set != 0 {
		lib.name = "openblas"
		lib.setThreads = set
		purego.SyscallN(set, 1)
	}
	if path == "/System/Library/Frameworks/Accelerate.framework/Accelerate" {
		lib.name = "accelerate"
		lib.ownThreads = true
	}
	return lib, nil
}

// callGemm calls a Fortran ?gemm_ with its argument vector (13 pointers
// and the two hidden CHARACTER lengths).
func callGemm(fn uintptr, argv []uintptr) {
	purego.SyscallN(fn, argv...)
}

// setBLASThreads sets OpenBLAS's thread count (no-op for other libraries).
// Only benchmarks call it: MatMul assumes one thread.
func (lib *blasLibrary) setBLASThreads(n int) {
	if lib.setThreads != 0 {
		purego.SyscallN(lib.setThreads, uintptr(n))
	}
}
