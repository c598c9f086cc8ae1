// Package peercore chooses the OpenBLAS kernels ("core") the benchmarks'
// peers run with, so that forge is compared with numpy and PyTorch at their
// best on this machine.
//
// Debian's numpy and PyTorch use the same DYNAMIC_ARCH OpenBLAS, which
// picks its core from the CPU's family and model when it loads; on a CPU
// newer than the library it falls back to generic kernels (Prescott on an
// Intel Xeon of family 6 model 207: 36–40 sgemm GFLOP/s where SkylakeX
// reaches 233). Forge chooses its own core (forge/cpu); the peers get one
// chosen here by measurement, set as OPENBLAS_CORETYPE in their
// environment only:
//
//   - a user's OPENBLAS_CORETYPE is respected, for forge and the peers;
//   - a core named by hand (-peer-core) is used as named ("default": the
//     library's own choice);
//   - otherwise each core the CPU can run (cpu.BLASCores) and the library's
//     own choice run a short sgemm in a numpy process of their own
//     (calibrate.py: a correctness check, then a 2048³ sgemm, median of up
//     to 3 calls); the contenders (at least half the fastest rate) run
//     once more in the reverse order, each keeping its better figure, and
//     the fastest wins. About 6–7 s in all.
package peercore

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/forgeml/forge/forge/cpu"
)

//go:embed calibrate.py
var script string

// EnvVar is the variable OpenBLAS reads its core from when it loads.
const EnvVar = "OPENBLAS_CORETYPE"

// Default names the library's own choice of core (no OPENBLAS_CORETYPE).
const Default = "default"

// N is the size of the calibration's N×N×N sgemm.
const N = 2048

// Trial is one candidate of the calibration.
type Trial struct {
	Core     string  // OPENBLAS_CORETYPE given ("" for the library's own choice)
	Reported string  // the core openblas_get_corename reported in that process
	GFLOPS   float64 // median sgemm rate
	Err      string  // why the core is out (a crash, wrong results)
}

// Choice is the core the peers run with, and how it was chosen.
type Choice struct {
	// Core is the OPENBLAS_CORETYPE to set in the peers' environment, ""
	// to leave it as it is (the library's own choice, or the user's).
	Core string
	// How: "user" (OPENBLAS_CORETYPE in the environment), "flag" (named
	// by hand), "calibrated" (the fastest of Trials), or "unmeasured" (no
	// python with numpy to calibrate with: the library's own choice).
	How     string
	UserEnv string  // the user's OPENBLAS_CORETYPE, if any
	Trials  []Trial // with How "calibrated" (or a failed calibration)
	Elapsed time.Duration
}

// ForgeLines are the table header's lines about forge's own BLAS core:
// forge's Describe line (after label, e.g. "forge: "), and, when the user
// set OPENBLAS_CORETYPE, a line first saying who runs it (peer names the
// other side: "numpy", "PyTorch").
func (c Choice) ForgeLines(label, describe, peer string) []string {
	if c.UserEnv == "" {
		return []string{fmt.Sprintf("%s%s (%s unset)", label, describe, EnvVar)}
	}
	both := "forge and " + peer + " both run it"
	if c.How != "user" {
		both = "forge runs it, " + peer + " the core named by -peer-core"
	}
	return []string{fmt.Sprintf("%s=%s is set by the user: %s", EnvVar, c.UserEnv, both), label + describe}
}

// Choose picks the peers' core: the user's OPENBLAS_CORETYPE if set (both
// sides then run it), else named if not "" (Default for the library's
// own), else the fastest of a calibration under python.
func Choose(python, named string) Choice {
	if v := os.Getenv(EnvVar); v != "" {
		c := Choice{How: "user", UserEnv: v}
		if named != "" {
			c.How, c.Core = "flag", named
			if named == Default {
				c.Core = ""
			}
		}
		return c
	}
	if named != "" {
		c := Choice{How: "flag", Core: named}
		if named == Default {
			c.Core = ""
		}
		return c
	}
	c := Choice{How: "unmeasured"}
	if python == "" {
		return c
	}
	start := time.Now()
	candidates := append([]string{""}, cpu.BLASCores()...)
	for _, core := range candidates {
		// The library's own choice is measured first; a named core that
		// is that same core is not measured again.
		if core != "" && len(c.Trials) > 0 && strings.EqualFold(c.Trials[0].Reported, core) {
			continue
		}
		c.Trials = append(c.Trials, trial(python, core))
	}
	// A second pass, in the reverse order, over the contenders (at least
	// half the best rate: a generic core is 4× slower, a disturbed trial
	// rarely worse than 2×), keeping each core's better median: one pass
	// on a shared machine can lose a few percent, or for a moment a whole
	// core, to a neighbour, which would decide between cores that close.
	lead := 0.0
	for _, t := range c.Trials {
		if t.Err == "" {
			lead = max(lead, t.GFLOPS)
		}
	}
	for i := len(c.Trials) - 1; i >= 0; i-- {
		t := c.Trials[i]
		if t.Err != "" || t.GFLOPS < 0.5*lead {
			continue
		}
		if again := trial(python, t.Core); again.Err == "" && again.GFLOPS > t.GFLOPS {
			c.Trials[i].GFLOPS = again.GFLOPS
		}
	}
	c.Elapsed = time.Since(start)
	best := -1
	for i, t := range c.Trials {
		if t.Err == "" && t.GFLOPS > 0 && (best < 0 || t.GFLOPS > c.Trials[best].GFLOPS) {
			best = i
		}
	}
	if best >= 0 {
		c.How, c.Core = "calibrated", c.Trials[best].Core
	}
	return c
}

// trial measures one core in a numpy process of its own.
func trial(python, core string) Trial {
	t := Trial{Core: core}
	cmd := exec.Command(python, "-c", script, fmt.Sprint(N))
	cmd.Env = withCore(os.Environ(), core)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var r struct {
		Core   string
		GFLOPS float64 `json:"gflops"`
		Error  string
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &r); jerr != nil {
		msg := strings.TrimSpace(stderr.String())
		if err != nil {
			msg = fmt.Sprintf("%v %s", err, msg)
		}
		t.Err = strings.TrimSpace(firstLine(msg))
		if t.Err == "" {
			t.Err = "no result"
		}
		return t
	}
	t.Reported, t.GFLOPS, t.Err = r.Core, r.GFLOPS, r.Error
	return t
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// withCore returns env with OPENBLAS_CORETYPE set to core, or taken out
// when core is "".
func withCore(env []string, core string) []string {
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, EnvVar+"=") })
	if core != "" {
		env = append(env, EnvVar+"="+core)
	}
	return env
}

// Env is env as a peer process gets it: with the chosen core set, or, when
// the choice is the library's own or the user's, unchanged.
func (c Choice) Env(env []string) []string {
	if c.Core == "" && c.How != "flag" && c.How != "calibrated" {
		return env
	}
	return withCore(env, c.Core)
}

// Setting is how the peers' environment names the core, for a table
// header: "OPENBLAS_CORETYPE=SkylakeX", or "OPENBLAS_CORETYPE unset".
func (c Choice) Setting() string {
	switch {
	case c.Core != "":
		return EnvVar + "=" + c.Core
	case c.How == "user":
		return EnvVar + "=" + c.UserEnv
	}
	return EnvVar + " unset"
}

// String says in one line how the core was chosen, with the calibration's
// figures: "2048³ sgemm calibration (numpy, median of up to 3 calls,
// better of 2 passes; 6.5 s): library's own (Cooperlake) 191.4, Prescott
// 46.1, Haswell 150.2, Zen 160.3, SkylakeX 195.7 GFLOP/s → SkylakeX".
func (c Choice) String() string {
	switch c.How {
	case "user":
		s := fmt.Sprintf("the user's %s=%s, for forge and the peers alike", EnvVar, c.UserEnv)
		return s
	case "flag":
		if c.Core == "" {
			s := "the library's own choice, named by hand (-peer-core default)"
			if c.UserEnv != "" {
				s += fmt.Sprintf("; forge runs the user's %s=%s", EnvVar, c.UserEnv)
			}
			return s
		}
		s := fmt.Sprintf("%s, named by hand (-peer-core)", c.Core)
		if c.UserEnv != "" {
			s += fmt.Sprintf("; forge runs the user's %s=%s", EnvVar, c.UserEnv)
		}
		return s
	case "unmeasured":
		if len(c.Trials) == 0 {
			return "the library's own choice (no calibration: no python)"
		}
	}
	var parts []string
	for _, t := range c.Trials {
		name := t.Core
		if name == "" {
			name = "library's own"
			if t.Reported != "" {
				name += " (" + t.Reported + ")"
			}
		} else if t.Reported != "" && !strings.EqualFold(t.Reported, t.Core) {
			name += " (ran " + t.Reported + ")"
		}
		if t.Err != "" {
			parts = append(parts, name+" failed: "+t.Err)
		} else {
			parts = append(parts, fmt.Sprintf("%s %.1f", name, t.GFLOPS))
		}
	}
	s := fmt.Sprintf("%d³ sgemm calibration (numpy, median of up to 3 calls, better of 2 passes; %.1f s): %s GFLOP/s",
		N, c.Elapsed.Seconds(), strings.Join(parts, ", "))
	if c.How != "calibrated" {
		return s + " → none ran: the library's own choice"
	}
	won := c.Core
	if won == "" {
		won = "the library's own"
		if r := c.Trials[0].Reported; r != "" {
			won += " (" + r + ")"
		}
	}
	return s + " → " + won
}
