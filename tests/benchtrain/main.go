// Command benchtrain measures GPT training throughput next to PyTorch in
// the same run: for each config (the `tiny` and `small` models of
// ../shared/bench/torch_gpt_step.py) it times full training steps of
// forge's Trainer — zero grad, forward, loss, backward, global-norm clip,
// AdamW — and runs the PyTorch script at 1 and 2 threads, alternating
// rounds so both see the same machine. It prints each side's median step
// time, tokens/s, GFLOP/s and MFU (model FLOPs utilisation: training FLOPs
// per token, gpt.Config.FLOPsPerToken, times tokens/s, over the machine's
// measured FMA peak, profile.Peak), the ratio against PyTorch's best
// setting, and where forge's step time goes (forward, backward, optimizer;
// the top kernels; time outside kernels).
//
//	go run ./tests/benchtrain [-configs tiny,small] [-rounds 3] [-torch ../shared/bench/torch_gpt_step.py] [-peer-core NAME]
//
// PyTorch runs at its best: best of 1 and 2 threads, and the best OpenBLAS
// core. Debian's PyTorch uses the same DYNAMIC_ARCH OpenBLAS as numpy,
// which falls back to generic kernels on CPUs newer than itself; a short
// sgemm calibration (tests/bench/peercore, 6–7 s) picks the fastest core
// this CPU can run and sets it as OPENBLAS_CORETYPE in PyTorch's
// environment only (-peer-core names it by hand). Forge chooses its own
// kernels and runs with no such variable, unless the user set
// OPENBLAS_CORETYPE: then both sides run it and the header says so. Each
// row names the core it ran: forge's matmul path, and the core
// openblas_get_corename reported inside each PyTorch process.
//
// Like the PyTorch script, every step trains on one fixed batch of uniform
// random tokens with lr 3e-4 (no schedule): throughput does not depend on
// the data.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/profile"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/internal/numfmt"
	"github.com/forgeml/forge/tests/bench/peercore"
)

var (
	configsFlag = flag.String("configs", "tiny,small", "configs to measure")
	rounds      = flag.Int("rounds", 3, "alternating rounds of forge and PyTorch; figures are medians over all steps")
	torchScript = flag.String("torch", "../shared/bench/torch_gpt_step.py", "the PyTorch baseline script (\"\" to skip)")
	python      = flag.String("python", "/usr/bin/python3", "python with torch")
	quick       = flag.Bool("quick", false, "tiny only, one round of 3 steps, no PyTorch (a smoke test)")
	peer        = flag.String("peer-core", "", "OpenBLAS core for PyTorch (OPENBLAS_CORETYPE in its environment; \"default\": the library's own); empty: the fastest in a short calibration")
)

// The PyTorch side's setting, and the compute peak MFU is of.
var (
	choice peercore.Choice
	peak   *profile.Roofline
)

// steps per round, as in the PyTorch script.
var stepsPer = map[string]int{"tiny": 20, "small": 10}

type fixed struct{ x, y []int32 }

func (f fixed) Next() (x, y []int32) { return f.x, f.y }

type torchResult struct {
	Torch       string  `json:"torch"`
	Threads     int     `json:"threads"`
	BlasThreads int     `json:"blas_threads"`
	BlasCore    string  `json:"blas_core"`
	StepMS      float64 `json:"step_ms_median"`
	Steps       int     `json:"timed_steps"`
	Fwd         float64 `json:"fwd_ms_median"`
	Bwd         float64 `json:"bwd_ms_median"`
	Opt         float64 `json:"clip_opt_ms_median"`
	Loss        float64 `json:"loss_last"`
}

func main() {
	flag.Parse()
	names := strings.Split(*configsFlag, ",")
	if *quick {
		names, *rounds, *torchScript = []string{"tiny"}, 1, ""
		stepsPer["tiny"] = 3
	}
	if *torchScript != "" {
		if _, err := os.Stat(*torchScript); err != nil {
			fmt.Fprintf(os.Stderr, "benchtrain: no PyTorch script at %s (%v); pass -torch or -torch \"\"\n", *torchScript, err)
			*torchScript = ""
		}
	}
	dev := forge.DefaultDevice()
	if profile.KnownPeak(dev.Name()) == nil {
		fmt.Fprintln(os.Stderr, "benchtrain: measuring the machine's peak (FMA loops, sgemm, copy; once, then cached)…")
	}
	peak = profile.Peak()
	if *torchScript != "" {
		fmt.Fprintln(os.Stderr, "benchtrain: choosing PyTorch's OpenBLAS core (a short sgemm calibration)…")
		choice = peercore.Choose(*python, *peer)
	} else {
		choice = peercore.Choose("", *peer)
	}
	fmt.Printf("GPT training step, float32, CPU (%s); medians over %d rounds\n", cpuName(), *rounds)
	for _, l := range choice.ForgeLines("forge:   ", dev.Describe(), "PyTorch") {
		fmt.Println(l)
	}
	if *torchScript != "" {
		fmt.Printf("PyTorch: best of --threads 1 and 2 (OMP_WAIT_POLICY=PASSIVE), %s; the core each run reported is in its row\n", choice.Setting())
		fmt.Printf("PyTorch's core: %s\n", choice)
	}
	fmt.Printf("MFU: training FLOPs per token (gpt.Config.FLOPsPerToken) × tokens/s over %s\n\n", peakName())
	for _, name := range names {
		if err := bench(name); err != nil {
			fmt.Fprintf(os.Stderr, "benchtrain: %s: %v\n", name, err)
			os.Exit(1)
		}
	}
}

func bench(name string) error {
	cfg, err := train.LoadConfig(name)
	if err != nil {
		return err
	}
	cfg.LR, cfg.Warmup, cfg.Schedule, cfg.GradAccum = 3e-4, 0, "constant", 1
	m, err := gpt.New(cfg.Model, 0)
	if err != nil {
		return err
	}
	B, T := cfg.Batch, cfg.Model.Context
	g := forge.NewGenerator(1)
	data := g.RandInt(0, cfg.Model.Vocab, B, T+1).Int32s()
	x, y := make([]int32, 0, B*T), make([]int32, 0, B*T)
	for b := range B {
		row := data[b*(T+1) : (b+1)*(T+1)]
		x, y = append(x, row[:T]...), append(y, row[1:]...)
	}
	tr, err := train.NewTrainer(cfg, m, fixed{x, y}, nil)
	if err != nil {
		return err
	}
	for range 3 { // warm-up
		tr.Step()
	}
	n := stepsPer[name]
	var goMS []float64
	torchMS := map[int][]float64{}
	var torchLast map[int]torchResult
	for r := range *rounds {
		for range n {
			goMS = append(goMS, tr.Step().StepMS)
		}
		if *torchScript != "" {
			torchLast = map[int]torchResult{}
			for _, threads := range []int{1, 2} {
				res, err := runTorch(name, threads, n)
				if err != nil {
					return err
				}
				// The script reports a median per run; weight it by its steps.
				for range res.Steps {
					torchMS[threads] = append(torchMS[threads], res.StepMS)
				}
				torchLast[threads] = res
			}
		}
		fmt.Fprintf(os.Stderr, "  %s round %d/%d\n", name, r+1, *rounds)
	}
	tokens := float64(cfg.TokensPerStep())
	fpt := float64(cfg.Model.FLOPsPerToken())
	goMed := median(goMS)
	fmt.Printf("%s: %s parameters, batch %d × context %d = %d tokens/step, %.2f GFLOP/step (%.2f MFLOP/token)\n", name,
		numfmt.Thousands(nn.Count(m)), B, T, B*T, fpt*tokens/1e9, fpt/1e6)
	fmt.Printf("  %-22s %-22s %9s %10s %9s %7s\n", "", "BLAS core", "ms/step", "tokens/s", "GFLOP/s", "MFU")
	line := func(label, core string, ms float64) {
		gflops := fpt * tokens / ms / 1e6
		fmt.Printf("  %-22s %-22s %9.1f %10.0f %9.1f %6.1f%%\n", label, core, ms, tokens/ms*1e3, gflops, 100*gflops/peakGFLOPS())
	}
	line("forge", variantOf(forge.DefaultDevice()), goMed)
	modeRows(cfg, fixed{x, y}, tr, n, line)
	best, bestTh := 0.0, 0
	for _, th := range []int{1, 2} {
		if ms := torchMS[th]; len(ms) > 0 {
			med := median(ms)
			res := torchLast[th]
			core := res.BlasCore
			if core == "" {
				core = "(not OpenBLAS)"
			}
			line(fmt.Sprintf("PyTorch --threads %d", th), core, med)
			if choice.Core != "" && res.BlasCore != "" && !strings.EqualFold(res.BlasCore, choice.Core) {
				fmt.Printf("  WARNING: PyTorch was asked for %s but ran %s\n", choice.Core, res.BlasCore)
			}
			if best == 0 || med < best {
				best, bestTh = med, th
			}
		}
	}
	if best > 0 {
		fmt.Printf("  forge / PyTorch (best, --threads %d): %.2f× the tokens/s\n", bestTh, best/goMed)
	}
	profileStep(tr, goMed)
	fmt.Println()
	return nil
}

// A mode is a training variant measured beside the plain model.
type mode struct {
	label string
	set   func(c *train.Config)
}

// modes are the rows of the training modes, on the config's
// shape: the Muon optimizer, quantisation-aware training, activation
// checkpointing, and
// mixtures of experts as k and the number of experts change (each expert
// of the config's MLP size, so a token's cost grows with k).
var modes = []mode{
	{"muon", func(c *train.Config) { c.Optimizer = "muon" }},
	{"quant int8", func(c *train.Config) { c.Model.Quant = forge.QuantInt8 }},
	{"quant ternary", func(c *train.Config) { c.Model.Quant = forge.QuantTernary }},
	{"checkpointed", func(c *train.Config) { c.Model.Checkpoint = gpt.AllBlocks() }},
	{"moe E4 k1", func(c *train.Config) { c.Model.Experts, c.Model.TopK = 4, 1 }},
	{"moe E4 k2", func(c *train.Config) { c.Model.Experts, c.Model.TopK = 4, 2 }},
	{"moe E8 k1", func(c *train.Config) { c.Model.Experts, c.Model.TopK = 8, 1 }},
	{"moe E8 k2", func(c *train.Config) { c.Model.Experts, c.Model.TopK = 8, 2 }},
}

// modeRows times each mode, alternating rounds with the plain model's
// trainer so both see the same machine, and prints a row per mode with
// its tokens/s relative to the plain model's over the same rounds. Its
// GFLOP/s and MFU columns count the plain model's FLOPs per token (a MoE
// of k experts does about k times the MLP's; a checkpointed step runs the
// blocks' forward twice), so compare modes by tokens/s.
func modeRows(cfg train.Config, batch train.Batches, plain *train.Trainer, n int, line func(label, core string, ms float64)) {
	for _, md := range modes {
		c := cfg
		md.set(&c)
		m, err := gpt.New(c.Model, 0)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtrain: %s: %v\n", md.label, err)
			continue
		}
		tr, err := train.NewTrainer(c, m, batch, nil)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtrain: %s: %v\n", md.label, err)
			continue
		}
		for range 3 {
			tr.Step()
		}
		var qMS, pMS []float64
		for range *rounds {
			for range n {
				pMS = append(pMS, plain.Step().StepMS)
			}
			for range n {
				qMS = append(qMS, tr.Step().StepMS)
			}
		}
		q, p := median(qMS), median(pMS)
		line("forge "+md.label, fmt.Sprintf("%.2f× plain tokens/s", p/q), q)
	}
}

func runTorch(config string, threads, steps int) (torchResult, error) {
	var res torchResult
	cmd := exec.Command(*python, *torchScript, "--config", config, "--threads", fmt.Sprint(threads), "--steps", fmt.Sprint(steps))
	cmd.Env = append(choice.Env(os.Environ()), "OMP_WAIT_POLICY=PASSIVE")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("%s: %v\n%s", filepath.Base(*torchScript), err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return res, fmt.Errorf("reading the PyTorch result: %v", err)
	}
	return res, nil
}

// profileStep records a few steps with forge/profile and prints where the
// time goes: per phase, the top kernels, and the time outside kernels.
func profileStep(tr *train.Trainer, stepMS float64) {
	const n = 5
	p := profile.RunN(n, func() { tr.Step() })
	fmt.Printf("  where forge's step goes (%d profiled steps; %.1f ms a step without recording):\n", n, stepMS)
	rep := p.Report(profile.ReportOptions{Group: profile.GroupName, Top: 8, Peak: peak})
	for _, line := range strings.Split(strings.TrimRight(rep.String(), "\n"), "\n") {
		fmt.Println("    " + line)
	}
}

// peakGFLOPS is the denominator of MFU: the measured FMA peak, or the
// roof the profiler uses when the machine has no FMA loop (see peakName).
func peakGFLOPS() float64 {
	if peak.FMA > 0 && peak.FMAVector {
		return peak.FMA
	}
	return peak.GFLOPS
}

// peakName says what peakGFLOPS is: "the measured FMA peak, 231.4 GFLOP/s
// (avx512-zmm on 2 workers; sgemm 2048³ 190.2 = 82 % of it)".
func peakName() string {
	sg := fmt.Sprintf("sgemm %d³ %.1f = %.0f %% of it", peak.MatmulN, peak.Sgemm, 100*peak.Sgemm/peakGFLOPS())
	if peak.Busy > 0.10 {
		sg += fmt.Sprintf("; measured while other processes used %.0f %% of the CPUs", 100*peak.Busy)
	}
	if peak.FMA > 0 && peak.FMAVector {
		return fmt.Sprintf("the measured FMA peak, %.1f GFLOP/s (%s on %d workers; %s)", peak.FMA, peak.FMAKernel, peak.Procs, sg)
	}
	return fmt.Sprintf("the profiler's roof, %.1f GFLOP/s from %s (no vector FMA loop here; %s)", peak.GFLOPS, peak.Roof, sg)
}

// variantOf is the device's matmul path ("openblas-Cooperlake").
func variantOf(d *forge.Device) string {
	if v := d.Variant("matmul"); v != "" {
		return v
	}
	return d.Name()
}

// cpuName is the CPU's model name from /proc/cpuinfo, or the platform.
func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
