package forgetest

import (
	"os"
	"testing"

	"github.com/forgeml/forge/forge"
)

// testDevice opens the device named by FORGE_BACKEND (default "cpu").
func testDevice(t *testing.T) *forge.Device {
	name := os.Getenv("FORGE_BACKEND")
	if name == "" {
		name = "cpu"
	}
	dev, err := forge.OpenDevice(name)
	if err != nil {
		t.Fatalf("FORGE_BACKEND=%s: %v", name, err)
	}
	return dev
}

func TestGradCheck(t *testing.T) { GradCheck(t, testDevice(t)) }
