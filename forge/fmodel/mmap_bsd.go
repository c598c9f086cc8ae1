//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package fmodel

import "syscall"

// mapAligned maps size bytes of fd read-only. On Apple silicon the page is
// PageSize, so the mapping starts on a PageSize boundary; elsewhere it may
// not, and a device that needs one copies instead (Snapshot.Lend).
func mapAligned(fd, size int) ([]byte, func() error, error) {
	b, err := syscall.Mmap(fd, 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return b, func() error { return syscall.Munmap(b) }, nil
}
