//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fmodel

import (
	"fmt"
	"os"
)

// Mapped reports whether Load maps shards (rather than reading them).
const Mapped = true

// mapFile maps path read-only, starting on a PageSize boundary (so every
// tensor of a shard starts on one: a device may take the pages as its
// memory, Snapshot.Lend), and returns its bytes and how to unmap them.
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
	b, unmap, err := mapAligned(int(f.Fd()), int(fi.Size()))
	if err != nil {
		return nil, nil, fmt.Errorf("mapping %s: %v", path, err)
	}
	return b, unmap, nil
}
