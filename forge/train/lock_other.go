//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package train

import "os"

// tryLock: on platforms without flock the run directory is not locked (a
// second writer is not refused there).
func tryLock(f *os.File) error { return nil }
