package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/profile"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/internal/atomicfile"
)

// benchArgs is the argument summary of `forge bench` in the command table.
const benchArgs = "matmul M N K | attention [--b 16 --t 128 --h 4 --d 32] | softmax N C | rmsnorm N C | " +
	"cross_entropy N V | copy N | step [--config tiny] [--profile] [--trace out.json] | peak [--recalibrate]"

// benchFlags lists the flags each `forge bench` target accepts beyond
// --budget and --json.
var benchFlags = map[string][]string{
	"attention": {"b", "t", "h", "d"},
	"step":      {"config", "profile", "trace", "steps", "top", "group", "sort", "by-phase", "roofline"},
	"peak":      {"recalibrate"},
}

func cmdBench(e *env, args []string) error {
	fs := flags(e, "bench")
	budget := fs.Duration("budget", time.Second, "time to spend timing each benchmark, warm-up included")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	b := fs.Int("b", 16, "attention: batch")
	t := fs.Int("t", 128, "attention: sequence length")
	h := fs.Int("h", 4, "attention: heads")
	d := fs.Int("d", 32, "attention: head dimension")
	config := fs.String("config", "tiny", "step: config name ("+strings.Join(configNames(), ", ")+") or a .json file")
	prof := fs.Bool("profile", false, "step: also profile a few steps (per-phase times, top kernels, roofline)")
	trace := fs.String("trace", "", "step: write the profiled steps as a Chrome trace (Perfetto) to this file; implies --profile")
	steps := fs.Int("steps", 5, "step: steps to profile")
	top := fs.Int("top", 15, "step: kernels to list (0: all)")
	group := fs.String("group", "shape", "step: one row per kernel and \"shape\", per kernel \"name\", or per \"scope\" (layer)")
	sortBy := fs.String("sort", "total", "step: order rows by total, calls, mean or name")
	byPhase := fs.Bool("by-phase", false, "step: separate rows for forward, backward and optimizer")
	roof := fs.Bool("roofline", true, "step: place kernels against this machine's peak (measured once, ~1 s, then cached)")
	recal := fs.Bool("recalibrate", false, "peak: measure again even if cached")
	device := deviceFlag(fs)
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" && len(args) == 1 || a == "-help" || a == "--help" }) {
		// -h alone asks for help; elsewhere it is attention's --h.
		fmt.Fprintln(e.stderr, "flags:")
		fs.PrintDefaults()
		return flag.ErrHelp
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("name a kernel to time: %s", benchArgs)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"b", *b}, {"t", *t}, {"h", *h}, {"d", *d}, {"steps", *steps}} {
		if f.v < 1 {
			return usagef("--%s %d: want a number >= 1", f.name, f.v)
		}
	}
	if *top < 0 {
		return usagef("--top %d: want a number of kernels >= 1 (or 0: all)", *top)
	}
	name, rest := pos[0], pos[1:]
	allowed := append([]string{"budget", "json", "device"}, benchFlags[name]...)
	var stray []string
	fs.Visit(func(f *flag.Flag) {
		if !slices.Contains(allowed, f.Name) {
			stray = append(stray, "--"+f.Name)
		}
	})
	if len(stray) > 0 {
		return usagef("%s does not take %s (see 'forge help bench')", name, strings.Join(stray, ", "))
	}
	opts := profile.BenchOptions{Budget: *budget}
	if *budget <= 0 {
		return usagef("--budget must be positive, got %v", *budget)
	}
	if err := e.useDevice(*device); err != nil {
		return err
	}

	switch name {
	case "step":
		if len(rest) > 0 {
			return usagef("step takes no sizes (got %s); choose the model with --config", strings.Join(rest, " "))
		}
		ro := profile.ReportOptions{Group: profile.GroupBy(*group), Sort: profile.SortBy(*sortBy), Top: *top, ByPhase: *byPhase}
		if !slices.Contains([]profile.GroupBy{profile.GroupShape, profile.GroupName, profile.GroupScope}, ro.Group) {
			return usagef("--group must be shape, name or scope, got %q", *group)
		}
		if !slices.Contains([]profile.SortBy{profile.SortTotal, profile.SortCalls, profile.SortMean, profile.SortName}, ro.Sort) {
			return usagef("--sort must be total, calls, mean or name, got %q", *sortBy)
		}
		if *steps < 1 || *top < 0 {
			return usagef("--steps must be at least 1 and --top at least 0")
		}
		return benchStep(e, *config, *prof || *trace != "", *trace, *steps, *roof, *asJSON, opts, ro)
	case "peak":
		if len(rest) > 0 {
			return usagef("peak takes no arguments")
		}
		return benchPeak(e, *recal, *asJSON)
	}

	dims := make([]int, len(rest))
	for i, s := range rest {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			return usagef("%s: sizes must be positive integers, got %q", name, s)
		}
		dims[i] = v
	}
	names := []string{name}
	if name == "attention" {
		if len(dims) > 0 && (flagSet(fs, "b") || flagSet(fs, "t") || flagSet(fs, "h") || flagSet(fs, "d")) {
			return usagef("attention: give the sizes as --b --t --h --d or as four numbers, not both")
		}
		if len(dims) == 0 {
			dims = []int{*b, *t, *h, *d}
		}
		names = append(names, "attention+backward")
	}
	var results []profile.KernelResult
	for _, n := range names {
		var r profile.KernelResult
		if err := forge.Try(func() { r, err = profile.BenchKernelOpts(opts, n, dims...) }); err != nil {
			return err
		}
		var bad profile.ArgError
		if errors.As(err, &bad) {
			return usagef("%s", bad.Msg)
		}
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	if *asJSON {
		return writeJSON(e.stdout, results)
	}
	peak := profile.KnownPeak(forge.DefaultDevice().Name())
	for _, r := range results {
		fmt.Fprintln(e.stdout, r)
		if bound, att, pct := r.OnRoofline(peak); bound != "" {
			fmt.Fprintf(e.stdout, "  %s-bound: %.0f %% of the roofline (%.1f GFLOP/s attainable at %.2f FLOP/B)\n",
				bound, 100*pct, att, float64(r.FLOPs)/float64(max(r.Bytes, 1)))
		}
	}
	printDevice(e)
	return nil
}

func benchStep(e *env, config string, prof bool, trace string, steps int, roof, asJSON bool, opts profile.BenchOptions, ro profile.ReportOptions) error {
	if prof && roof {
		ro.Peak = peakFor(e)
	}
	var res *train.BenchStepResult
	var err error
	if perr := forge.Try(func() {
		res, err = train.BenchStep(config, train.BenchStepOptions{Bench: opts, Profile: prof, ProfileSteps: steps})
	}); perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	var rep *profile.Report
	if res.Profile != nil {
		rep = res.Profile.Report(ro)
	}
	if trace != "" {
		if err := atomicfile.Write(trace, res.Profile.WriteTrace); err != nil {
			return fmt.Errorf("writing the trace %s: %w", trace, err)
		}
	}
	if asJSON {
		return writeJSON(e.stdout, struct {
			*train.BenchStepResult
			Report *profile.Report `json:"report,omitempty"`
		}{res, rep})
	}
	fmt.Fprintln(e.stdout, res)
	if rep != nil {
		fmt.Fprintf(e.stdout, "\n%d steps profiled; per step:\n%s", res.Profile.Iterations, rep) // its header says what ran
	} else {
		printDevice(e)
	}
	if trace != "" {
		fmt.Fprintf(e.stdout, "\ntrace written to %s (open it in https://ui.perfetto.dev or chrome://tracing)\n", trace)
	}
	return nil
}

func benchPeak(e *env, recalibrate, asJSON bool) error {
	var p *profile.Roofline
	if recalibrate {
		fmt.Fprintln(e.stderr, "forge bench: measuring this machine's peak (FMA loops, 2048³ sgemm, 64 MiB copy)…")
		var err error
		if p, err = profile.Calibrate(); err != nil {
			fmt.Fprintf(e.stderr, "forge bench: %s\n", oneLine(err))
		}
	} else {
		p = peakFor(e)
	}
	if asJSON {
		return writeJSON(e.stdout, p)
	}
	fmt.Fprintln(e.stdout, p)
	return nil
}

// peakFor returns the default device's peak, saying on stderr when it has
// to be measured first.
func peakFor(e *env) *profile.Roofline {
	if p := profile.KnownPeak(forge.DefaultDevice().Name()); p != nil {
		return p
	}
	fmt.Fprintln(e.stderr, "forge bench: measuring this machine's peak (FMA loops, 2048³ sgemm, 64 MiB copy; once per machine)…")
	return profile.Peak()
}

// printDevice ends `forge info` and the benchmarks with what the default
// device runs its kernels with: "device: cpu: 2 workers, matmul
// openblas-Cooperlake: OpenBLAS 0.3.21, Cooperlake kernels, …".
func printDevice(e *env) {
	fmt.Fprintf(e.stdout, "device: %s\n", forge.DefaultDevice().Describe())
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return errors.New("encoding the result: " + err.Error())
	}
	return nil
}
