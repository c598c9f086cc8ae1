package notebook

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/forgeml/forge/forge"
)

// Device makes the named device ("cpu", "metal" on macOS with Apple
// silicon, "metal-emu": the Metal kernels on the CPU, with clang) the one
// the cell's tensors and runs use, and prints it with the reason in one
// line; "" keeps the default choice (FORGE_BACKEND, else Metal on Apple
// silicon when it opens, else the CPU) and prints that. A name that is no
// device is an error listing the devices; a device that does not open
// returns its error and leaves the default as it was.
//
// Every GoNB cell is a new process: call it at the top of each cell,
// before Open (a run opened before stays on the device it was opened on):
//
//	if _, err := notebook.Device("metal"); err != nil { panic(err) }
//	s, err := notebook.Open("runs/tiny")
func Device(name string) (*forge.Device, error) { return device(os.Stdout, name) }

func device(w io.Writer, name string) (*forge.Device, error) {
	if name != "" {
		if !slices.Contains(forge.DeviceNames(), name) {
			return nil, fmt.Errorf("notebook: no device %q; the devices are %s", name, strings.Join(forge.DeviceNames(), ", "))
		}
		if _, err := forge.UseDevice(name, "notebook.Device"); err != nil {
			return nil, err
		}
	}
	c, err := forge.DefaultDeviceChoice()
	if err != nil {
		return nil, err
	}
	noticeOnce.Do(func() {}) // said here: Open need not say it again
	d := forge.DefaultDevice()
	fmt.Fprintf(w, "device %s (%s)\n", d.Describe(), c.Reason)
	return d, nil
}

// noticeOnce prints the default choice's notice (Metal picked on a Mac,
// or why the CPU) once per process, at the first Open.
var noticeOnce sync.Once

// sayDevice prints the default choice's notice to w, the first time only.
func sayDevice(w io.Writer) {
	noticeOnce.Do(func() {
		if c, err := forge.DefaultDeviceChoice(); err == nil && c.Notice != "" {
			fmt.Fprintln(w, c.Notice)
		}
	})
}
