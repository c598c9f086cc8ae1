//go:build !linux && !darwin

package emu

import "unsafe"

func allocBuffer(size int) (data []byte, release func(), err error) {
	mem := make([]byte, size+256)
	off := int(-uintptr(unsafe.Pointer(&mem[0])) & 255)
	return mem[off : off+size : off+size], func() {}, nil
}

func attachCleanup(b *buffer) {}
