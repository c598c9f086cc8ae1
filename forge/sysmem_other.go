//go:build !darwin

package forge

// physicalMemory is not known here (Linux reads /proc/meminfo instead).
func physicalMemory() (int64, bool) { return 0, false }
