//go:build !(darwin || linux || freebsd || netbsd)

package cpu

import (
	"errors"
	"runtime"
)

// openBLAS fails: purego's dlopen is not available on this OS.
func openBLAS(path string) (*blasLibrary, error) {
	return nil, errors.New("loading BLAS is not supported on " + runtime.GOOS)
}

func callGemm(fn uintptr, argv []uintptr) {
	panic("cpu: gemm: no BLAS on " + runtime.GOOS)
}

func (lib *blasLibrary) setBLASThreads(n int) {}

func (lib *blasLibrary) blasThreads() int { return 0 }
