//go:build !darwin

package train

// physicalMemory is not known here (Linux reads /proc/meminfo instead).
func physicalMemory() (int64, bool) { return 0, false }
