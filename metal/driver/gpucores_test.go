package driver

import "testing"

func TestGPUCoresByName(t *testing.T) {
	for name, want := range map[string]int{
		"Apple M1":        7,
		"Apple M1 Pro":    14,
		"Apple M1 Max":    24,
		"Apple M1 Ultra":  48,
		"Apple M2 Max":    30,
		"Apple M3 Pro":    14,
		"Apple M4 Max":    32,
		"Apple M5":        10,
		" Apple  M2  Pro": 16, // spacing does not matter
		"Apple M9 Max":    0,  // a chip the table does not know
		"AMD Radeon Pro":  0,
		"Apple M1 Promax": 0,
		"":                0,
	} {
		if got := GPUCoresByName(name); got != want {
			t.Errorf("GPUCoresByName(%q) = %d, want %d", name, got, want)
		}
	}
}
