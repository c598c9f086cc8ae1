// Command benchtrain measures GPT training throughput next to PyTorch in
// the same run: for each config (the `tiny` and `small` models of
// ../shared/bench/torch_gpt_step.py) it times full training steps of
// forge's Trainer — zero grad, forward, loss, backward, global-norm clip,
// AdamW — and runs the PyTorch script at 1 and 2 threads, alternating
// rounds so both see the same machine. It prints each side's median step
// time, tokens/s, the ratio against PyTorch's best setting, and where
// forge's step time goes (forward, backward, optimizer; the top kernels;
// time outside kernels).
//
//	go run ./tests/benchtrain [-configs tiny,small] [-rounds 3] [-torch ../shared/bench/torch_gpt_step.py]
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
	"slices"
	"strings"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/profile"
	"github.com/forgeml/forge/forge/train"
)

var (
	configsFlag = flag.String("configs", "tiny,small", "configs to measure")
	rounds      = flag.Int("rounds", 3, "alternating rounds of forge and PyTorch; figures are medians over all steps")
	torchScript = flag.String("torch", "../shared/bench/torch_gpt_step.py", "the PyTorch baseline script (\"\" to skip)")
	python      = flag.String("python", "/usr/bin/python3", "python with torch")
	quick       = flag.Bool("quick", false, "tiny only, one round of 3 steps, no PyTorch (a smoke test)")
)

// steps per round, as in the PyTorch script.
var stepsPer = map[string]int{"tiny": 20, "small": 10}

type fixed struct{ x, y []int32 }

func (f fixed) Next() (x, y []int32) { return f.x, f.y }

type torchResult struct {
	StepMS float64 `json:"step_ms_median"`
	Steps  int     `json:"timed_steps"`
	Fwd    float64 `json:"fwd_ms_median"`
	Bwd    float64 `json:"bwd_ms_median"`
	Opt    float64 `json:"clip_opt_ms_median"`
	Loss   float64 `json:"loss_last"`
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
	fmt.Printf("GPT training step, float32, CPU (%s); medians over %d rounds\n\n", forge.DefaultDevice().Name(), *rounds)
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
	goMed := median(goMS)
	fmt.Printf("%s: %s parameters, batch %d × context %d = %d tokens/step, %.2f GFLOP/step\n", name,
		nn.Thousands(nn.Count(m)), B, T, B*T, float64(cfg.Model.FLOPsPerToken())*tokens/1e9)
	fmt.Printf("  %-24s %9s %12s %9s\n", "", "ms/step", "tokens/s", "GFLOP/s")
	line := func(label string, ms float64) {
		fmt.Printf("  %-24s %9.1f %12.0f %9.1f\n", label, ms, tokens/ms*1e3, float64(cfg.Model.FLOPsPerToken())*tokens/ms/1e6)
	}
	line("forge", goMed)
	best := 0.0
	for _, th := range []int{1, 2} {
		if ms := torchMS[th]; len(ms) > 0 {
			med := median(ms)
			line(fmt.Sprintf("PyTorch --threads %d", th), med)
			if best == 0 || med < best {
				best = med
			}
		}
	}
	if best > 0 {
		fmt.Printf("  forge / PyTorch (best):  %.2f× the tokens/s\n", best/goMed)
	}
	profileStep(tr, goMed)
	fmt.Println()
	return nil
}

func runTorch(config string, threads, steps int) (torchResult, error) {
	var res torchResult
	cmd := exec.Command(*python, *torchScript, "--config", config, "--threads", fmt.Sprint(threads), "--steps", fmt.Sprint(steps))
	cmd.Env = append(os.Environ(), "OMP_WAIT_POLICY=PASSIVE")
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
	rep := p.Report(profile.ReportOptions{Group: profile.GroupName, Top: 8})
	for _, line := range strings.Split(strings.TrimRight(rep.String(), "\n"), "\n") {
		fmt.Println("    " + line)
	}
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
