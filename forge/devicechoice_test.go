package forge

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestChooseDevice runs the default-device policy on the platforms it
// distinguishes, with the facts (OS, architecture, Rosetta, FORGE_BACKEND,
// the registered backends and whether each opens) injected.
func TestChooseDevice(t *testing.T) {
	all := []string{"cpu", "metal", "metal-emu"}
	metalErr := errors.New("metal: no Metal device (MTLCreateSystemDefaultDevice returned nil)")
	cases := []struct {
		name              string
		goos, goarch      string
		translated, test  bool
		env               string
		registered        []string
		fails             map[string]error // open errors by device
		want              string           // device; "" for an error
		reason, notice    string           // substrings ("" notice: none)
		fallback          bool
		wantErr           string
		opened, notOpened []string
	}{
		{name: "apple silicon", goos: "darwin", goarch: "arm64", registered: all,
			want: "metal", reason: "Apple silicon", notice: "forge: using metal: Apple M3 Max (MSL 3.1, math safe); --device cpu for the CPU",
			opened: []string{"metal"}, notOpened: []string{"cpu"}},
		{name: "apple silicon, metal fails", goos: "darwin", goarch: "arm64", registered: all, fails: map[string]error{"metal": metalErr},
			want: "cpu", reason: "Metal failed to open: no Metal device (MTLCreateSystemDefaultDevice returned nil)",
			notice: "forge: using the CPU: Metal failed to open: no Metal device", fallback: true, opened: []string{"metal", "cpu"}},
		{name: "apple silicon, no metal backend", goos: "darwin", goarch: "arm64", registered: []string{"cpu"},
			want: "cpu", reason: "not in this program", opened: []string{"cpu"}},
		{name: "rosetta", goos: "darwin", goarch: "amd64", translated: true, registered: all,
			want: "cpu", reason: "running under Rosetta (an amd64 build on Apple silicon): Metal needs the arm64 build — GOARCH=arm64 go build",
			notice: "forge: using the CPU: running under Rosetta", fallback: true, opened: []string{"cpu"}, notOpened: []string{"metal"}},
		{name: "intel mac", goos: "darwin", goarch: "amd64", registered: all,
			want: "cpu", reason: "the default on darwin/amd64", opened: []string{"cpu"}, notOpened: []string{"metal"}},
		{name: "test binary on apple silicon", goos: "darwin", goarch: "arm64", test: true, registered: all,
			want: "cpu", reason: "a test binary", opened: []string{"cpu"}, notOpened: []string{"metal"}},
		{name: "test binary with FORGE_BACKEND", goos: "darwin", goarch: "arm64", test: true, env: "metal", registered: all,
			want: "metal", reason: "FORGE_BACKEND=metal", opened: []string{"metal"}},
		{name: "linux", goos: "linux", goarch: "amd64", registered: all,
			want: "cpu", reason: "the default on linux/amd64", opened: []string{"cpu"}, notOpened: []string{"metal", "metal-emu"}},
		{name: "linux arm64", goos: "linux", goarch: "arm64", registered: all,
			want: "cpu", reason: "the default on linux/arm64", notOpened: []string{"metal"}},
		{name: "FORGE_BACKEND on linux", goos: "linux", goarch: "amd64", env: "metal-emu", registered: all,
			want: "metal-emu", reason: "FORGE_BACKEND=metal-emu", opened: []string{"metal-emu"}, notOpened: []string{"cpu"}},
		{name: "FORGE_BACKEND=cpu on apple silicon", goos: "darwin", goarch: "arm64", env: "cpu", registered: all,
			want: "cpu", reason: "FORGE_BACKEND=cpu", notOpened: []string{"metal"}},
		{name: "FORGE_BACKEND=metal does not fall back", goos: "darwin", goarch: "arm64", env: "metal", registered: all,
			fails: map[string]error{"metal": metalErr}, wantErr: "FORGE_BACKEND=metal: metal: no Metal device"},
		{name: "FORGE_BACKEND unknown", goos: "linux", goarch: "amd64", env: "gpu", registered: all,
			wantErr: `FORGE_BACKEND=gpu: no device "gpu"; the devices are cpu, metal, metal-emu`},
		{name: "no backends", goos: "linux", goarch: "amd64", wantErr: "no backend is registered"},
		{name: "rosetta without cpu", goos: "darwin", goarch: "amd64", translated: true, registered: []string{"metal"},
			wantErr: "running under Rosetta"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var opened []string
			p := platform{goos: c.goos, goarch: c.goarch, translated: c.translated, test: c.test, env: c.env, registered: c.registered,
				open: func(name string) (string, error) {
					opened = append(opened, name)
					if !slices.Contains(c.registered, name) {
						t.Fatalf("opened %q, which is not registered", name)
					}
					if err := c.fails[name]; err != nil {
						return "", err
					}
					return map[string]string{"metal": "metal: Apple M3 Max (MSL 3.1, math safe)", "cpu": "cpu: go", "metal-emu": "metal-emu (clang 19)"}[name], nil
				}}
			got, err := chooseDevice(p)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("chooseDevice = %+v, %v; want one line containing %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != c.want || !strings.Contains(got.Reason, c.reason) || got.Fallback != c.fallback {
				t.Errorf("chooseDevice = %+v; want %s, reason containing %q, fallback %v", got, c.want, c.reason, c.fallback)
			}
			if c.notice == "" && got.Notice != "" || !strings.Contains(got.Notice, c.notice) {
				t.Errorf("notice %q; want %q", got.Notice, c.notice)
			}
			if strings.Contains(got.Notice+got.Reason, "\n") {
				t.Errorf("notice or reason spans lines: %+v", got)
			}
			for _, n := range c.opened {
				if !slices.Contains(opened, n) {
					t.Errorf("did not open %s (opened %v)", n, opened)
				}
			}
			for _, n := range c.notOpened {
				if slices.Contains(opened, n) {
					t.Errorf("opened %s (opened %v); the choice needs no %s", n, opened, n)
				}
			}
		})
	}
}

// TestUseDevice: UseDevice sets the default and its reason, an unknown
// name lists the devices and leaves the default alone, and putting the
// device back with SetDefaultDevice keeps the reason.
func TestUseDevice(t *testing.T) {
	prev := DefaultDevice()
	t.Cleanup(func() { SetDefaultDevice(prev) })
	d, err := UseDevice("cpu", "--device cpu")
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := DefaultDeviceChoice(); DefaultDevice() != d || c.Name != "cpu" || c.Reason != "--device cpu" {
		t.Fatalf("after UseDevice: %v, %+v", DefaultDevice(), c)
	}
	_, err = UseDevice("gpu", "--device gpu")
	if err == nil || !strings.Contains(err.Error(), `no device "gpu"; the devices are `+strings.Join(DeviceNames(), ", ")) {
		t.Fatalf("UseDevice(gpu) = %v", err)
	}
	if c, _ := DefaultDeviceChoice(); DefaultDevice() != d || c.Reason != "--device cpu" {
		t.Fatalf("a failed UseDevice changed the default: %+v", c)
	}
	SetDefaultDevice(d)
	if c, _ := DefaultDeviceChoice(); c.Reason != "--device cpu" {
		t.Errorf("SetDefaultDevice of the chosen device lost the reason: %+v", c)
	}
}
