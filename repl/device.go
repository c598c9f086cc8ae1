package repl

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/forgeml/forge/forge"
)

// deviceDoc is the :help text of :device beyond its line.
const deviceDoc = "The devices: cpu, metal (macOS on Apple silicon), metal-emu (the Metal kernels on the CPU, with clang).\n" +
	"With a run open, :device saves it and opens it again on the new device (model, optimizer and data\n" +
	"position from the checkpoint). Tensors made in Go before stay on the old device: t.To(forge.DefaultDevice())."

// cmdDevice shows the device and why it was chosen, or moves the session
// (and its open run) to another.
func cmdDevice(s *Session, _ context.Context, args []string) error {
	if len(args) > 1 {
		return usagef("give one device: %s", strings.Join(forge.DeviceNames(), ", "))
	}
	if len(args) == 0 {
		return s.showDevice()
	}
	name := args[0]
	if !slices.Contains(forge.DeviceNames(), name) {
		return fmt.Errorf("no device %q; the devices are %s", name, strings.Join(forge.DeviceNames(), ", "))
	}
	old := forge.DefaultDevice()
	if name == old.Name() {
		fmt.Fprintf(s.stdout, "already on %s\n", name)
		return nil
	}
	if s.run == nil {
		if _, err := forge.UseDevice(name, ":device "+name); err != nil {
			return err
		}
		return s.showDevice()
	}
	// The run's tensors live on the old device: rebuild it from its
	// checkpoint on the new one, saving the steps taken since the last save.
	if err := s.saveIfNeeded(); err != nil {
		return err
	}
	if _, err := forge.UseDevice(name, ":device "+name); err != nil {
		return err // nothing changed: the run is still open on old
	}
	dir := s.run.Dir()
	if err := s.Open(dir, "", nil); err != nil {
		forge.SetDefaultDevice(old)
		if rerr := s.Open(dir, "", nil); rerr != nil {
			return fmt.Errorf("opening %s on %s: %v; and again on %s: %v", dir, name, err, old.Name(), rerr)
		}
		return fmt.Errorf("opening %s on %s: %v; it stays on %s", dir, name, err, old.Name())
	}
	return s.showDevice()
}

// showDevice prints the device, the reason it is the one, and the others.
func (s *Session) showDevice() error {
	c, err := forge.DefaultDeviceChoice()
	if err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "device    %s\n", forge.DefaultDevice().Describe())
	fmt.Fprintf(s.stdout, "why       %s\n", c.Reason)
	var others []string
	for _, n := range forge.DeviceNames() {
		if n != c.Name {
			others = append(others, n)
		}
	}
	if len(others) > 0 {
		fmt.Fprintf(s.stdout, "others    %s (:device <name> moves to one)\n", strings.Join(others, ", "))
	}
	return nil
}

func completeDevices(*Session, []string) []string { return forge.DeviceNames() }
