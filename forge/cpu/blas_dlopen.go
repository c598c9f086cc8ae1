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
		lib.getThreads, _ = purego.Dlsym(h, "openblas_get_num_threads")
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

// setBLASThreads sets OpenBLAS's thread count (a no-op for other
// libraries). Only blasCall changes it, holding blasMu.
func (lib *blasLibrary) setBLASThreads(n int) {
	if lib.setThreads != 0 {
		purego.SyscallN(lib.setThreads, uintptr(n))
	}
}

// blasThreads returns OpenBLAS's thread count (0 for other libraries).
func (lib *blasLibrary) blasThreads() int {
	if lib.getThreads == 0 {
		return 0
	}
	r, _, _ := purego.SyscallN(lib.getThreads)
	return int(int32(r))
}
