package forge

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/internal/rosetta"
)

// DeviceChoice is the device DefaultDevice uses and why.
//
// With nothing chosen, the default is Metal on Apple silicon (darwin/arm64)
// when it opens, and the CPU otherwise — and in go test binaries, which
// name their device with FORGE_BACKEND. FORGE_BACKEND overrides that, and
// UseDevice (a front end's --device) or SetDefaultDevice override both.
type DeviceChoice struct {
	Name string // the device: "cpu", "metal", "metal-emu"
	// Reason says in one line why: "FORGE_BACKEND=metal-emu", "Apple
	// silicon and Metal opened", "Metal failed to open: …".
	Reason string
	// Notice is the line a front end prints once, before its first
	// tensor, when the device was chosen for the user and they may want
	// the other: Metal picked on a Mac, or the CPU because Metal could not
	// be used there (failed to open, or a Rosetta build). "" when there
	// was no choice to make (Linux, an Intel Mac) or the user made it.
	Notice string
	// Fallback is true when the CPU stands in for a device that failed.
	Fallback bool
}

// String is the device and the reason, for :device and info lines.
func (c DeviceChoice) String() string { return c.Name + " (" + c.Reason + ")" }

// platform is what chooseDevice looks at, gathered by hostPlatform and
// injected by the tests.
type platform struct {
	goos, goarch string
	translated   bool   // an amd64 process under Rosetta on Apple silicon
	test         bool   // a go test binary
	env          string // FORGE_BACKEND
	registered   []string
	// open opens the named registered device and returns its one-line
	// description (Device.Describe).
	open func(name string) (string, error)
}

// hostPlatform is this process's platform, opening devices through
// OpenDevice.
func hostPlatform() platform {
	return platform{
		goos: runtime.GOOS, goarch: runtime.GOARCH, translated: rosetta.Translated(), test: testing.Testing(),
		env: os.Getenv("FORGE_BACKEND"), registered: backend.Names(),
		open: func(name string) (string, error) {
			d, err := OpenDevice(name)
			if err != nil {
				return "", err
			}
			return d.Describe(), nil
		},
	}
}

// chooseDevice decides the default device: it is the whole policy, and
// opens nothing but through p.open.
func chooseDevice(p platform) (DeviceChoice, error) {
	if len(p.registered) == 0 {
		return DeviceChoice{}, &Error{Op: "device", Msg: `no backend is registered: import _ "github.com/forgeml/forge/forge/backends" (or a backend package such as forge/cpu) in your program`}
	}
	if p.env != "" {
		if err := checkDeviceName(p.env, p.registered); err != nil {
			return DeviceChoice{}, fmt.Errorf("FORGE_BACKEND=%s: %w", p.env, err)
		}
		if _, err := p.open(p.env); err != nil {
			return DeviceChoice{}, fmt.Errorf("FORGE_BACKEND=%s: %w", p.env, err)
		}
		return DeviceChoice{Name: p.env, Reason: "FORGE_BACKEND=" + p.env}, nil
	}
	c := DeviceChoice{Name: "cpu"}
	switch {
	case p.test:
		// Tests name their device (make test-metal sets FORGE_BACKEND), so
		// that go test ./... on a Mac checks what it checks on Linux.
		c.Reason = "a test binary: the CPU unless FORGE_BACKEND names another"
	case p.goos == "darwin" && p.goarch == "arm64" && slices.Contains(p.registered, "metal"):
		desc, err := p.open("metal")
		if err == nil {
			return DeviceChoice{Name: "metal", Reason: "Apple silicon and Metal opened",
				Notice: "forge: using " + desc + "; --device cpu for the CPU"}, nil
		}
		why := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "forge: "), "metal: ")
		c.Reason, c.Fallback = "Metal failed to open: "+why, true
		c.Notice = "forge: using the CPU: " + c.Reason
	case p.goos == "darwin" && p.translated:
		c.Reason, c.Fallback = rosetta.Hint, true
		c.Notice = "forge: using the CPU: " + c.Reason
	case p.goos == "darwin" && p.goarch == "arm64":
		c.Reason = "the Metal backend is not in this program (import forge/backends)"
	default:
		c.Reason = "the default on " + p.goos + "/" + p.goarch + " (Metal needs macOS on Apple silicon)"
	}
	if !slices.Contains(p.registered, "cpu") {
		return DeviceChoice{}, &Error{Op: "device", Msg: c.Reason + `, and the cpu backend is not registered: import _ "github.com/forgeml/forge/forge/backends" (or forge/cpu)`}
	}
	if _, err := p.open("cpu"); err != nil {
		return DeviceChoice{}, err
	}
	return c, nil
}

// checkDeviceName returns nil if name is registered, else an error
// listing the devices that are.
func checkDeviceName(name string, registered []string) error {
	if slices.Contains(registered, name) {
		return nil
	}
	return fmt.Errorf("no device %q; the devices are %s", name, strings.Join(registered, ", "))
}

// DeviceNames lists the devices this program can open (the registered
// backends: "cpu", "metal", "metal-emu", …), in alphabetical order.
// Whether one opens on this machine is known only by opening it.
func DeviceNames() []string { return backend.Names() }

// DefaultDeviceChoice makes the default choice if none is made yet (see
// DeviceChoice) and returns it: the device DefaultDevice returns and why.
// Its error is the one DefaultDevice panics with: FORGE_BACKEND names a
// device that is not there or does not open, or no backend is registered.
func DefaultDeviceChoice() (DeviceChoice, error) {
	devMu.Lock()
	if defaultDev != nil {
		c := defaultChoice
		devMu.Unlock()
		return c, nil
	}
	devMu.Unlock()
	c, err := chooseDevice(hostPlatform())
	if err != nil {
		return DeviceChoice{}, err
	}
	d, err := OpenDevice(c.Name) // opened by chooseDevice already
	if err != nil {
		return DeviceChoice{}, err
	}
	devMu.Lock()
	defer devMu.Unlock()
	if defaultDev == nil { // else another goroutine chose (or the program set one) meanwhile
		defaultDev, defaultChoice, lastChoice = d, c, c
	}
	return defaultChoice, nil
}

// UseDevice opens the named device and makes it the default, with reason
// (say "--device metal") as DefaultDeviceChoice's Reason. An unknown name
// gives an error listing the devices; a device that does not open gives
// its error, and leaves the default as it was.
func UseDevice(name, reason string) (*Device, error) {
	if err := checkDeviceName(name, backend.Names()); err != nil {
		return nil, fmt.Errorf("forge: %w", err)
	}
	d, err := OpenDevice(name)
	if err != nil {
		return nil, err
	}
	devMu.Lock()
	defaultChoice = DeviceChoice{Name: name, Reason: reason}
	defaultDev, lastChoice = d, defaultChoice
	devMu.Unlock()
	return d, nil
}
