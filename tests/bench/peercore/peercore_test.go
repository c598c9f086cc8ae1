package peercore

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestChooseByHandAndUser(t *testing.T) {
	t.Setenv(EnvVar, "")
	os.Unsetenv(EnvVar)
	base := []string{"PATH=/bin", EnvVar + "=Prescott"}

	c := Choose("", "SkylakeX")
	if c.How != "flag" || c.Core != "SkylakeX" || !slices.Equal(c.Env(base), []string{"PATH=/bin", EnvVar + "=SkylakeX"}) ||
		c.Setting() != EnvVar+"=SkylakeX" || !strings.Contains(c.String(), "named by hand") {
		t.Errorf("by hand: %+v, env %q, %q", c, c.Env(base), c)
	}
	c = Choose("", Default)
	if c.How != "flag" || c.Core != "" || !slices.Equal(c.Env(base), []string{"PATH=/bin"}) || c.Setting() != EnvVar+" unset" {
		t.Errorf("default by hand: %+v, env %q", c, c.Env(base))
	}
	c = Choose("", "")
	if c.How != "unmeasured" || c.Core != "" || !slices.Equal(c.Env(base), base) {
		t.Errorf("no python: %+v", c)
	}

	// A user's OPENBLAS_CORETYPE passes through to the peers unchanged.
	t.Setenv(EnvVar, "Haswell")
	c = Choose("/no/such/python", "")
	if c.How != "user" || c.UserEnv != "Haswell" || len(c.Trials) != 0 || !slices.Equal(c.Env(base), base) ||
		c.Setting() != EnvVar+"=Haswell" || !strings.Contains(c.String(), "the user's "+EnvVar+"=Haswell") {
		t.Errorf("user's: %+v, %q", c, c)
	}
	if c = Choose("", "SkylakeX"); c.How != "flag" || c.UserEnv != "Haswell" || !strings.Contains(c.String(), "forge runs the user's") {
		t.Errorf("user's and by hand: %+v, %q", c, c)
	}
}

// A calibration whose every process fails chooses nothing and says why.
func TestCalibrationFailures(t *testing.T) {
	os.Unsetenv(EnvVar)
	c := Choose("/bin/false", "")
	if c.How != "unmeasured" || c.Core != "" || len(c.Trials) == 0 || c.Trials[0].Err == "" ||
		!strings.Contains(c.String(), "failed") || !strings.Contains(c.String(), "none ran") {
		t.Errorf("%+v: %q", c, c)
	}
}

// With numpy at hand, the calibration measures the library's own choice
// and the cores the CPU runs, and every process reports the core it ran.
func TestCalibrate(t *testing.T) {
	if testing.Short() {
		t.Skip("a calibration takes a few seconds")
	}
	if exec.Command("/usr/bin/python3", "-c", "import numpy").Run() != nil {
		t.Skip("no python with numpy")
	}
	os.Unsetenv(EnvVar)
	c := Choose("/usr/bin/python3", "")
	t.Log(c)
	if c.How != "calibrated" || len(c.Trials) < 2 {
		t.Fatalf("%+v", c)
	}
	for _, tr := range c.Trials[1:] {
		if tr.Err == "" && !strings.EqualFold(tr.Reported, tr.Core) {
			t.Errorf("asked for %s, the process ran %s", tr.Core, tr.Reported)
		}
	}
}

func TestForgeLines(t *testing.T) {
	for _, c := range []struct {
		ch   Choice
		want []string
	}{
		{Choice{How: "calibrated"}, []string{"forge: D (" + EnvVar + " unset)"}},
		{Choice{How: "user", UserEnv: "Haswell"}, []string{EnvVar + "=Haswell is set by the user: forge and numpy both run it", "forge: D"}},
		{Choice{How: "flag", UserEnv: "Haswell"}, []string{EnvVar + "=Haswell is set by the user: forge runs it, numpy the core named by -peer-core", "forge: D"}},
	} {
		if got := c.ch.ForgeLines("forge: ", "D", "numpy"); !slices.Equal(got, c.want) {
			t.Errorf("%+v: %q, want %q", c.ch, got, c.want)
		}
	}
}
