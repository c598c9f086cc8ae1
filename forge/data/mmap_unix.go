//go:build linux || darwin

package data

import (
	"fmt"
	"math"
	"os"
	"syscall"
)

// mapFile maps the file at path read-only and returns its bytes and the
// function that unmaps them. An empty file is returned as nil bytes
// (mmap refuses length 0); the caller's header check reports it.
func mapFile(path string) ([]byte, func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, openError(path, err)
	}
	defer f.Close() // the mapping outlives the descriptor
	st, err := f.Stat()
	if err != nil {
		return nil, nil, openError(path, err)
	}
	size := st.Size()
	if size == 0 {
		return nil, func() error { return nil }, nil
	}
	if size > math.MaxInt {
		return nil, nil, fmt.Errorf("data: %s: %d bytes do not fit this platform's address space; use a 64-bit build", path, size)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("data: memory-mapping token file %s: %w", path, err)
	}
	return b, func() error { return syscall.Munmap(b) }, nil
}

// mapped reports whether mapFile maps files (rather than reading them).
const mapped = true
