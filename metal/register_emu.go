package metal

import (
	"os"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

// "metal-emu" runs the embedded kernels on the CPU through the emulation
// driver (clang compiles the MSL sources on first use; see package
// metal/emu for its settings: FORGE_EMU_THREADS, FORGE_EMU_SCHEDULE).
func init() {
	backend.Register("metal-emu", func() (backend.Backend, error) {
		drv, err := emu.Open(kernels.Sources(), emu.Options{Log: os.Stderr})
		if err != nil {
			return nil, err
		}
		return New(drv), nil
	})
}
