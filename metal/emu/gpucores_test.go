package emu

import "testing"

// TestGPUCores: unknown (0) until SetGPUCores; a negative count is unknown.
func TestGPUCores(t *testing.T) {
	var d Driver
	if got := d.GPUCores(); got != 0 {
		t.Errorf("new driver: %d cores, want 0 (unknown)", got)
	}
	for _, c := range []struct{ set, want int }{{10, 10}, {-5, 0}, {38, 38}, {0, 0}} {
		d.SetGPUCores(c.set)
		if got := d.GPUCores(); got != c.want {
			t.Errorf("after SetGPUCores(%d): %d, want %d", c.set, got, c.want)
		}
	}
}
