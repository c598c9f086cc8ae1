//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package flock

import "os"

// Supported reports whether TryLock really locks on this platform.
const Supported = false

// TryLock: on platforms without flock nothing is locked (a second writer
// is not refused there).
func TryLock(f *os.File) error { return nil }
