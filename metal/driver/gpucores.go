package driver

import "strings"

// GPUCores is implemented by drivers that know how many cores their GPU
// has (an optional interface, like TensorOps: the backend checks for it
// with a type assertion). The backend sizes split-K matrix products by it.
type GPUCores interface {
	// GPUCores returns the GPU's core count, or 0 when the driver does
	// not know it (the backend then assumes its default).
	GPUCores() int
}

// appleGPUCores are the GPU core counts of Apple's M-series chips by the
// name Metal reports (MTLDevice.name, "Apple M2 Pro"), from Apple's
// published specifications. A chip sold with several GPU core counts
// (an M1 Pro has 14 or 16) maps to the fewest: the name does not tell
// which, and a count that is too low only under-splits a larger GPU
// where one too high over-splits a smaller one.
var appleGPUCores = map[string]int{
	"M1": 7, "M1 Pro": 14, "M1 Max": 24, "M1 Ultra": 48,
	"M2": 8, "M2 Pro": 16, "M2 Max": 30, "M2 Ultra": 60,
	"M3": 8, "M3 Pro": 14, "M3 Max": 30, "M3 Ultra": 60,
	"M4": 8, "M4 Pro": 16, "M4 Max": 32,
	"M5": 10,
}

// GPUCoresByName returns the GPU core count of the Apple chip a Metal
// device name denotes ("Apple M3 Max" → 30, the fewest the chip ships
// with), or 0 for a name the table does not know (another GPU, a later
// chip): the caller's default then applies.
func GPUCoresByName(name string) int {
	chip := strings.Join(strings.Fields(strings.TrimPrefix(strings.TrimSpace(name), "Apple ")), " ")
	return appleGPUCores[chip]
}
