//go:build !linux && !darwin

package data

import "os"

// mapFile reads the whole file at path: this platform has no memory
// mapping in the package yet. The release function does nothing.
func mapFile(path string) ([]byte, func() error, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, openError(path, err)
	}
	return b, func() error { return nil }, nil
}

// mapped reports whether mapFile maps files (rather than reading them).
const mapped = false
