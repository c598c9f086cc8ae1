package cli

import (
	"runtime"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
)

// TestDeviceFlagEveryCommand: every command that computes takes --device,
// and a name that is no device is one line listing the devices (exit 2)
// before anything runs. The table names every command, so a new one must
// say whether it takes the flag.
func TestDeviceFlagEveryCommand(t *testing.T) {
	dir := t.TempDir()
	listing := `--device gpu: no device "gpu"; the devices are ` + strings.Join(forge.DeviceNames(), ", ")
	cases := map[string]struct {
		args []string // after the command name and before --device gpu
		code int
		want string // in the one line of stderr; "" for none
	}{
		"repl":     {[]string{"--no-open"}, 2, listing},
		"train":    {[]string{"--run", dir + "/r"}, 2, listing},
		"generate": {[]string{"--run", dir}, 2, listing},
		"eval":     {[]string{"--run", dir}, 2, listing},
		"info":     {[]string{"--config", "tiny"}, 2, listing},
		"export":   {[]string{"--out", dir + "/x"}, 2, listing},
		"model":    {[]string{"to-safetensors", dir, dir + "/o"}, 2, listing},
		"bench":    {[]string{"matmul", "8", "8", "8"}, 2, listing},
		"demo":     {nil, 2, listing},
		"doctor":   {[]string{"--out", dir, "--short"}, 2, listing},
		// prepare and check make no tensors: no --device.
		"prepare": {[]string{"--out", dir + "/p"}, 2, "flag provided but not defined: -device"},
		"check":   {[]string{"--run", dir}, 2, "flag provided but not defined: -device"},
		"version": {nil, 0, ""},
		"help":    {nil, 0, ""},
	}
	for _, c := range commands {
		tc, ok := cases[c.name]
		if !ok {
			t.Errorf("command %q is not in this table: add it (does it compute? then it takes --device through deviceFlag and useDevice)", c.name)
			continue
		}
		args := append(append([]string{c.name}, tc.args...), "--device", "gpu")
		r := runCLI(args...)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != tc.code || tc.want != "" && (len(lines) != 1 || !strings.Contains(lines[0], tc.want)) {
			t.Errorf("forge %s: exit %d (want %d), stderr %q (want one line containing %q)", strings.Join(args, " "), r.code, tc.code, r.stderr, tc.want)
		}
		if tc.want == listing {
			if !strings.Contains(helpOf(t, c.name), "-device") {
				t.Errorf("forge help %s does not mention --device", c.name)
			}
		}
	}
}

// helpOf returns `forge help name`.
func helpOf(t *testing.T, name string) string {
	r := runCLI("help", name)
	if r.code != 0 {
		t.Fatalf("forge help %s: exit %d: %s", name, r.code, r.stderr)
	}
	return r.stdout
}

// TestDeviceFlagChooses: --device makes the device the default, with the
// flag as the reason; a device that does not open here is one line.
func TestDeviceFlagChooses(t *testing.T) {
	t.Cleanup(func() { forge.SetDefaultDevice(nil) }) // the next test chooses again
	r := runCLI("info", "--config", "tiny", "--device", "cpu")
	if r.code != 0 {
		t.Fatalf("info --device cpu: exit %d: %s", r.code, r.stderr)
	}
	c, err := forge.DefaultDeviceChoice()
	if err != nil || c.Name != "cpu" || c.Reason != "--device cpu" || forge.DefaultDevice().Name() != "cpu" {
		t.Errorf("after --device cpu: %+v, %v", c, err)
	}
	if !strings.Contains(r.stdout, "device: "+forge.DefaultDevice().Describe()) {
		t.Errorf("info does not print the device:\n%s", r.stdout)
	}
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		return
	}
	r = runCLI("info", "--config", "tiny", "--device", "metal")
	if r.code != 1 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 ||
		!strings.Contains(r.stderr, "forge info: --device metal: metal: the Metal backend needs macOS on Apple silicon") {
		t.Errorf("--device metal off a Mac: exit %d, stderr %q", r.code, r.stderr)
	}
	if c, _ := forge.DefaultDeviceChoice(); c.Reason != "--device cpu" {
		t.Errorf("a device that did not open changed the default: %+v", c)
	}
}

// TestDeviceNotice: the default choice's notice (Metal picked on a Mac, or
// why the CPU) is one line on stderr, printed once per command; a device
// named with --device has none.
func TestDeviceNotice(t *testing.T) {
	prev := defaultChoice
	t.Cleanup(func() { defaultChoice = prev })
	const notice = "forge: using metal: Apple M3 Max (MSL 3.1, math safe); --device cpu for the CPU"
	defaultChoice = func() (forge.DeviceChoice, error) {
		return forge.DeviceChoice{Name: "cpu", Reason: "injected", Notice: notice}, nil
	}
	e := &env{}
	var errb strings.Builder
	e.stderr = &errb
	for range 2 {
		if err := e.useDevice(""); err != nil {
			t.Fatal(err)
		}
	}
	if errb.String() != notice+"\n" {
		t.Errorf("stderr %q; want the notice once", errb.String())
	}
	r := runCLI("info", "--config", "tiny")
	if r.code != 0 || strings.Count(r.stderr, notice) != 1 {
		t.Errorf("info: exit %d, stderr %q; want the notice once", r.code, r.stderr)
	}
	t.Cleanup(func() { forge.SetDefaultDevice(nil) })
	if r := runCLI("info", "--config", "tiny", "--device", "cpu"); r.code != 0 || strings.Contains(r.stderr, notice) {
		t.Errorf("info --device cpu: exit %d, stderr %q; want no notice", r.code, r.stderr)
	}
}
