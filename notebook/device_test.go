package notebook

import (
	"runtime"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
)

// TestDevice: Device names the device for the cell's tensors and says so
// with the reason; a bad name lists the devices; a device that does not
// open leaves the default as it was.
func TestDevice(t *testing.T) {
	t.Cleanup(func() { forge.SetDefaultDevice(nil) }) // the next test chooses again
	var out strings.Builder
	d, err := device(&out, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	want := "device " + d.Describe() + " (notebook.Device)\n"
	if d.Name() != "cpu" || forge.DefaultDevice() != d || out.String() != want {
		t.Errorf("Device(cpu) = %v, printed %q; want cpu, %q", d, out.String(), want)
	}
	if x := forge.Ones(2); x.Device() != d {
		t.Errorf("a new tensor is on %v, not %v", x.Device(), d)
	}
	out.Reset()
	if d2, err := device(&out, ""); err != nil || d2 != d || out.String() != want {
		t.Errorf(`Device("") = %v, %v, printed %q; want the device kept, %q`, d2, err, out.String(), want)
	}
	_, err = device(&out, "gpu")
	if err == nil || err.Error() != `notebook: no device "gpu"; the devices are `+strings.Join(forge.DeviceNames(), ", ") {
		t.Errorf("Device(gpu): %v", err)
	}
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		return
	}
	if _, err := device(&out, "metal"); err == nil || !strings.Contains(err.Error(), "needs macOS on Apple silicon") {
		t.Errorf("Device(metal) here: %v", err)
	}
	if forge.DefaultDevice() != d {
		t.Errorf("a device that did not open became the default: %v", forge.DefaultDevice())
	}
}
