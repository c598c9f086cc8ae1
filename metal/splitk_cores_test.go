package metal

import (
	"testing"

	"github.com/forgeml/forge/metal/emu"
)

// coresDriver is the recording driver reporting a GPU core count through
// the optional driver.GPUCores, as the Metal driver and the emulator do.
type coresDriver struct {
	*fakeDriver
	cores int
}

func (d coresDriver) GPUCores() int { return d.cores }

// TestSplitKPlanCores: the split-K decision follows the GPU's core count
// — from the driver, from FORGE_METAL_GPU_CORES ahead of it, and the
// default of 16 when neither says — worked by hand from the rule
// (tiles = ⌈M/32⌉·⌈N/32⌉, G = 4·cores, split when 2·tiles < G into
// min(⌈G/tiles⌉, K-steps/8, 32, (M+N)·K/(2·M·N)) chunks).
func TestSplitKPlanCores(t *testing.T) {
	defer func(n int) { envGPUCores = n }(envGPUCores)
	envGPUCores = 0
	type plan struct{ splits, chunk int }
	for _, tc := range []struct {
		cores   int // 0: the driver does not say
		m, n, k int
		want    plan
	}{
		{7, 64, 64, 4096, plan{7, 592}},     // 4 tiles, G 28: 7 chunks of 37 steps
		{0, 64, 64, 4096, plan{16, 256}},    // default 16 cores, G 64
		{16, 64, 64, 4096, plan{16, 256}},   // the same, said by the driver
		{40, 64, 64, 4096, plan{32, 128}},   // G 160, capped at 32 partials
		{16, 256, 256, 4096, plan{1, 4096}}, // 64 tiles fill half of G 64
		{38, 256, 256, 4096, plan{3, 1376}}, // G 152: 3 chunks of 86 steps
		{7, 256, 256, 4096, plan{1, 4096}},
		{60, 768, 768, 65536, plan{1, 65536}}, // 576 tiles: no split even at 60 cores
	} {
		b := New(coresDriver{newFakeDriver(), tc.cores})
		s, chunk := b.splitKPlan(tc.m, tc.n, tc.k)
		if got := (plan{s, chunk}); got != tc.want {
			t.Errorf("%d cores, %d×%d×%d: %d splits of %d, want %d of %d", tc.cores, tc.m, tc.n, tc.k, s, chunk, tc.want.splits, tc.want.chunk)
		}
	}

	// FORGE_METAL_GPU_CORES overrides the driver.
	envGPUCores = 40
	if s, _ := New(coresDriver{newFakeDriver(), 7}).splitKPlan(64, 64, 4096); s != 32 {
		t.Errorf("FORGE_METAL_GPU_CORES=40 over a 7-core driver: %d splits, want 32", s)
	}
	envGPUCores = 0

	// The emulator reports what SetGPUCores says, and the plan follows.
	if b := opsDevice(t); b != nil {
		drv, ok := b.Driver().(*emu.Driver)
		if !ok {
			t.Skipf("not the emulator: %T", b.Driver())
		}
		defer drv.SetGPUCores(0)
		for cores, want := range map[int]int{0: 16, 7: 7, 40: 32} {
			drv.SetGPUCores(cores)
			if s, _ := b.splitKPlan(64, 64, 4096); s != want {
				t.Errorf("emulator at %d cores: 64×64×4096 in %d splits, want %d", cores, s, want)
			}
		}
	}
}

func TestParseGPUCores(t *testing.T) {
	for s, want := range map[string]int{"": 0, " ": 0, "12": 12, " 38 ": 38, "0": 0, "-4": 0, "many": 0, "1e3": 0, "99999999": 0} {
		if got := parseGPUCores(s); got != want {
			t.Errorf("parseGPUCores(%q) = %d, want %d", s, got, want)
		}
	}
}
