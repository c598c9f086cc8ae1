package repl

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/forgeml/forge/configs"
	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/profile"
	"github.com/forgeml/forge/forge/train"
)

func kernelNames() string {
	var n []string
	for _, k := range profile.Kernels {
		n = append(n, k.Name+" "+k.Dims)
	}
	return strings.Join(n, ", ")
}

func reportOptions() profile.ReportOptions {
	return profile.ReportOptions{Top: 15, Peak: profile.KnownPeak(forge.DefaultDevice().Name())}
}

func cmdProfile(s *Session, ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("give 'step' or a Go expression")
	}
	if len(args) == 1 && args[0] == "step" {
		if err := s.needRun(); err != nil {
			return err
		}
		// One real step of the run, recorded and saved like :step's.
		rec := profile.Start()
		defer rec.Stop()
		var m train.Metrics
		if _, err := s.run.TrainWith(ctx, 1, train.RunOptions{NoEval: true}, func(mm train.Metrics) error { m = mm; rec.Stop(); return nil }); err != nil {
			return err
		}
		p := rec.Stop()
		s.savedStep = s.run.Trainer().StepCount()
		if m.Step == 0 {
			fmt.Fprintln(s.stdout, "interrupted before the step")
			return nil
		}
		fmt.Fprintf(s.stdout, "step %d: loss %.4f in %.1f ms; per kernel:\n%s", m.Step, m.Loss, m.StepMS, p.Report(reportOptions()))
		return nil
	}
	fn, err := s.goFunc(ctx, strings.Join(args, " "))
	if err != nil {
		return err
	}
	var p *profile.Profile
	if err := forge.Try(func() { p = profile.Run(fn) }); err != nil {
		return err
	}
	fmt.Fprint(s.stdout, p.Report(reportOptions()))
	return nil
}

// goFunc compiles src (statements or an expression) into a function the
// library can call; an interpreted panic becomes a panic of the call.
func (s *Session) goFunc(ctx context.Context, src string) (func(), error) {
	g, err := s.interp()
	if err != nil {
		return nil, err
	}
	fv, err := g.evalAs(ctx, "__f := func() {\n"+src+"\n}", src, nil)
	if err != nil {
		var err2 error
		if fv, err2 = g.eval(ctx, "__f := func() { _ = ("+src+") }"); err2 != nil {
			return nil, err
		}
	}
	if fv.Kind() != reflect.Func {
		return nil, errors.New("not a Go statement or expression")
	}
	return func() { fv.Call(nil) }, nil
}

func cmdBench(s *Session, ctx context.Context, args []string) error {
	opts, pos, err := flagArgs(args, []string{"budget"}, nil)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("name a kernel, 'step' or give a Go expression")
	}
	bo := profile.BenchOptions{Budget: s.settings.benchtime}
	if v, ok := opts["budget"]; ok {
		if bo.Budget, err = time.ParseDuration(v); err != nil || bo.Budget <= 0 {
			return usagef("--budget wants a positive duration (500ms, 2s), got %q", v)
		}
	}
	name := pos[0]
	if name == "step" {
		if len(pos) > 2 {
			return usagef("step takes at most a config")
		}
		config := "tiny"
		if len(pos) == 2 {
			config = pos[1]
		} else if s.run != nil {
			config = filepath.Join(s.run.Dir(), train.ConfigFile)
		}
		var res *train.BenchStepResult
		var err error
		if perr := forge.Try(func() { res, err = train.BenchStep(config, train.BenchStepOptions{Bench: bo}) }); perr != nil {
			return perr
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(s.stdout, res)
		return nil
	}
	for _, k := range profile.Kernels {
		if k.Name != name {
			continue
		}
		dims := make([]int, len(pos)-1)
		for i, a := range pos[1:] {
			if dims[i], err = strconv.Atoi(a); err != nil || dims[i] <= 0 {
				return usagef("%s: sizes must be positive integers (%s), got %q", name, k.Dims, a)
			}
		}
		var r profile.KernelResult
		if perr := forge.Try(func() { r, err = profile.BenchKernelOpts(bo, name, dims...) }); perr != nil {
			return perr
		}
		var bad profile.ArgError
		if errors.As(err, &bad) {
			return usagef("%s", bad.Msg)
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(s.stdout, r)
		return nil
	}
	fn, err := s.goFunc(ctx, strings.Join(pos, " "))
	if err != nil {
		return err
	}
	var res profile.BenchResult
	if err := forge.Try(func() {
		bo.Sync = func() {
			if ctx.Err() != nil {
				panic(errInterrupted)
			}
		}
		res = profile.Bench(fn, bo)
	}); err != nil {
		if errors.Is(err, errInterrupted) {
			return errors.New("interrupted")
		}
		return err
	}
	fmt.Fprintln(s.stdout, res)
	return nil
}

var errInterrupted = errors.New("interrupted")

func configNames() []string { return configs.Names() }
