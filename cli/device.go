package cli

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/forgeml/forge/forge"
)

// deviceHelp is the --device line of the commands that compute.
const deviceHelp = "the device to compute on: cpu, metal (macOS on Apple silicon) or metal-emu (the Metal kernels on the CPU, with clang); " +
	"default: FORGE_BACKEND, else metal on Apple silicon when it opens, else cpu"

// deviceFlag adds --device to the flags of a command that creates tensors.
func deviceFlag(fs *flag.FlagSet) *string { return fs.String("device", "", deviceHelp) }

// defaultChoice is forge.DefaultDeviceChoice; the tests replace it.
var defaultChoice = forge.DefaultDeviceChoice

// useDevice makes the device of --device name the default ("": the
// default choice) before a command's first tensor, and prints the
// choice's notice on stderr (Metal picked on a Mac, or why not), once per
// command. An unknown name is a usage error listing the devices.
func (e *env) useDevice(name string) error {
	if name != "" {
		if !slices.Contains(forge.DeviceNames(), name) {
			return usagef("--device %s: no device %q; the devices are %s", name, name, strings.Join(forge.DeviceNames(), ", "))
		}
		if _, err := forge.UseDevice(name, "--device "+name); err != nil {
			return fmt.Errorf("--device %s: %s", name, oneLine(err))
		}
		return nil
	}
	c, err := defaultChoice()
	if err != nil {
		return err
	}
	if c.Notice != "" && !e.noticed {
		fmt.Fprintln(e.stderr, c.Notice)
		e.noticed = true
	}
	return nil
}
