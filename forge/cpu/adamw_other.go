//go:build !amd64 || purego

package cpu

// adamwSlice32 reports false: the Go loop of adamwSlice runs.
func adamwSlice32(c adamwCoefs, w, g, m, v []float32) bool { return false }
