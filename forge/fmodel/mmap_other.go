//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package fmodel

import (
	"fmt"
	"os"
)

// Mapped reports whether Load maps shards (rather than reading them).
const Mapped = false

// mapFile reads path whole where mmap is not available.
func mapFile(path string) ([]byte, func() error, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() > MaxShardBytes+PageSize {
		return nil, nil, fmt.Errorf("%s: %d bytes is larger than a shard may be", path, fi.Size())
	}
	b, err := os.ReadFile(path)
	return b, func() error { return nil }, err
}
