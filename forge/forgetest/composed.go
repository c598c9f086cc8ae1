package forgetest

import (
	"slices"
	"sync"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
)

// composedBackend is a backend whose capability table lacks every
// optional kernel, so that package forge composes each of them from the
// required kernels.
type composedBackend struct{ backend.Backend }

func (c composedBackend) Capabilities() backend.Capabilities {
	return c.Backend.Capabilities().Without(backend.OptionalKernels...)
}

var composedMu sync.Mutex

// Composed returns a device running on dev's backend but without its
// optional kernels (backend.OptionalKernels): every fused op on it runs
// the composition package forge falls back to, as on a backend that
// implements only the required kernels. Running the suites on it checks
// the fallbacks against the same independent references as the fused
// kernels. Its name is dev's with "-composed" appended.
func Composed(dev *forge.Device) (*forge.Device, error) {
	name := dev.Name() + "-composed"
	composedMu.Lock()
	defer composedMu.Unlock()
	if !slices.Contains(backend.Names(), name) {
		base := dev.Name()
		backend.Register(name, func() (backend.Backend, error) {
			b, err := backend.Open(base)
			if err != nil {
				return nil, err
			}
			return composedBackend{b}, nil
		})
	}
	return forge.OpenDevice(name)
}
