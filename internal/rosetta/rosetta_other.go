//go:build !darwin

package rosetta

// Translated is false: Rosetta exists only on macOS.
func Translated() bool { return false }
