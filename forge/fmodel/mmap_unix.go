//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fmodel

import (
	"fmt"
	"os"
	"syscall"
)

// Mapped reports whether Load maps shards (rather than reading them).
const Mapped = true

// mapFile maps path read-only and returns its bytes and how to unmap them.
func mapFile(path string) ([]byte, func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() == 0 {
		return []byte{}, func() error { return nil }, nil
	}
	if fi.Size() > MaxShardBytes+PageSize {
		return nil, nil, fmt.Errorf("%s: %d bytes is larger than a shard may be", path, fi.Size())
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mapping %s: %v", path, err)
	}
	return b, func() error { return syscall.Munmap(b) }, nil
}
