//go:build linux || darwin

package emu

import (
	"os"
	"runtime"
	"syscall"
)

// mapping is a buffer's memory: its own anonymous mapping with an
// inaccessible guard page before and after, so a kernel that runs off
// either end of a buffer faults (and Wait reports which buffer) instead of
// corrupting the Go heap.
type mapping struct {
	m     []byte
	freed bool
}

// allocBuffer returns size zeroed bytes, 256-byte aligned, ending at most
// 255 bytes before the trailing guard page (exactly at it when size is a
// multiple of 256).
func allocBuffer(size int) (data []byte, release func(), err error) {
	page := os.Getpagesize()
	n := (max(size, 1) + page - 1) / page * page
	m, err := syscall.Mmap(-1, 0, n+2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil, err
	}
	if err := syscall.Mprotect(m[:page], syscall.PROT_NONE); err != nil {
		syscall.Munmap(m)
		return nil, nil, err
	}
	if err := syscall.Mprotect(m[page+n:], syscall.PROT_NONE); err != nil {
		syscall.Munmap(m)
		return nil, nil, err
	}
	start := (page + n - size) &^ 255
	mp := &mapping{m: m}
	data = m[start : start+size : start+size]
	release = func() {
		if !mp.freed {
			mp.freed = true
			syscall.Munmap(mp.m)
		}
	}
	return data, release, nil
}

// attachCleanup unmaps b's memory when b becomes unreachable unreleased.
func attachCleanup(b *buffer) {
	runtime.AddCleanup(b, func(r func()) { r() }, b.release)
}
