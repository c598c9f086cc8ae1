package repl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/internal/termplot"
)

func cmdStep(s *Session, ctx context.Context, args []string) error {
	if err := s.needRun(); err != nil {
		return err
	}
	n := 1
	if len(args) > 1 {
		return usagef("give one number of steps")
	}
	if len(args) == 1 {
		var err error
		if n, err = strconv.Atoi(args[0]); err != nil || n < 1 {
			return usagef("want a number of steps >= 1, got %q", args[0])
		}
	}
	// :step is for small moves: no validation pass (:eval computes one).
	return s.train(ctx, n, train.RunOptions{NoEval: true}, nil)
}

func cmdRun(s *Session, ctx context.Context, args []string) error {
	if err := s.needRun(); err != nil {
		return err
	}
	if len(args) == 0 {
		return usagef("give a number of steps or 'until <condition>'")
	}
	if args[0] != "until" {
		if len(args) > 1 {
			return usagef("give one number of steps")
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 1 {
			return usagef("want a number of steps >= 1 or 'until <condition>', got %q", args[0])
		}
		return s.train(ctx, n, train.RunOptions{}, nil)
	}
	limit := 10000
	cond := args[1:]
	if i := slices.Index(cond, "--max"); i >= 0 {
		if i+1 >= len(cond) {
			return usagef("--max needs a number of steps")
		}
		var err error
		if limit, err = strconv.Atoi(cond[i+1]); err != nil || limit < 1 {
			return usagef("--max wants a number of steps >= 1, got %q", cond[i+1])
		}
		cond = append(cond[:i:i], cond[i+2:]...)
	}
	if len(cond) == 0 {
		return usagef("give a condition, such as loss < 4.5")
	}
	g, err := s.interp()
	if err != nil {
		return err
	}
	fv, err := g.condition(ctx, strings.Join(cond, " "))
	if err != nil {
		return fmt.Errorf("the condition: %v", err)
	}
	val := math.NaN()
	if v := s.run.Trainer().History.LastVal(); v != nil {
		val = *v.ValLoss
	}
	met := false
	check := func(m train.Metrics) error {
		if m.ValLoss != nil {
			val = *m.ValLoss
		}
		out := fv.Call([]reflect.Value{reflect.ValueOf(m.Step), reflect.ValueOf(m.Loss), reflect.ValueOf(val), reflect.ValueOf(m.LR), reflect.ValueOf(m.GradNorm)})
		if out[0].Bool() {
			met = true
			return train.ErrStop
		}
		return nil
	}
	if err := s.train(ctx, limit, train.RunOptions{}, check); err != nil {
		return err
	}
	if met {
		fmt.Fprintf(s.stdout, "until %s: met at step %d\n", strings.Join(cond, " "), s.run.Trainer().StepCount())
	} else if ctx.Err() == nil {
		fmt.Fprintf(s.stdout, "until %s: not met in %d steps (--max)\n", strings.Join(cond, " "), limit)
	}
	return nil
}

// train runs n steps of the open run through train.Session.Train (which
// records every step and saves when it stops), drawing the live line and
// printing a summary. stop, if set, sees each step and may end the run
// with train.ErrStop.
func (s *Session) train(ctx context.Context, n int, opts train.RunOptions, stop train.Callback) error {
	r := s.run
	live := newLiveLine(s, n)
	cb := func(m train.Metrics) error {
		live.update(m)
		if stop != nil {
			return stop(m)
		}
		return nil
	}
	_, err := r.TrainWith(ctx, n, opts, cb)
	live.finish()
	if err != nil {
		return err
	}
	s.savedStep = r.Trainer().StepCount()
	sum := r.LastRun()
	if sum.Steps() == 0 {
		fmt.Fprintln(s.stdout, "interrupted before the first step; the run is unchanged")
		return nil
	}
	fmt.Fprintln(s.stdout, sum)
	if len(sum.Losses) > 1 {
		fmt.Fprintf(s.stdout, "loss %s\n", termplot.Sparkline(sum.Losses, min(60, s.width()-6)))
	}
	if sum.Interrupted {
		fmt.Fprintf(s.stdout, "interrupted at step %d; saved\n", sum.To)
	}
	return nil
}

// liveLine redraws one status line (at most 10 times a second) on a
// terminal: step, loss, lr, tokens/s and a sparkline of recent losses.
type liveLine struct {
	s      *Session
	on     bool
	total  int
	done   int
	recent []float64
	last   time.Time
	drawn  bool
}

func newLiveLine(s *Session, total int) *liveLine {
	return &liveLine{s: s, on: s.opts.Live && s.settings.live, total: total}
}

func (l *liveLine) update(m train.Metrics) {
	l.done++
	l.recent = append(l.recent, m.Loss)
	if len(l.recent) > 40 {
		l.recent = l.recent[len(l.recent)-40:]
	}
	if !l.on || time.Since(l.last) < 100*time.Millisecond && l.done < l.total {
		return
	}
	l.last = time.Now()
	line := fmt.Sprintf("step %d (%d/%d)  loss %.4f  lr %.2e  %s tok/s  %s",
		m.Step, l.done, l.total, m.Loss, m.LR, termplot.Kilo(m.TokensPerSec), termplot.Sparkline(l.recent, 20))
	w := l.s.width() - 1
	if utf8.RuneCountInString(line) > w {
		line = string([]rune(line)[:max(w, 0)])
	}
	fmt.Fprintf(l.s.stderr, "\r\x1b[K%s", line)
	l.drawn = true
}

func (l *liveLine) finish() {
	if l.drawn {
		fmt.Fprint(l.s.stderr, "\r\x1b[K")
	}
}

func cmdSample(s *Session, ctx context.Context, args []string) error {
	if err := s.needRun(); err != nil {
		return err
	}
	opts, pos, err := flagArgs(args, []string{"n", "t", "k", "p", "seed"}, nil)
	if err != nil {
		return err
	}
	n, temp, topK, topP, seed := 200, 0.8, 40, 0.95, s.settings.seed
	for k, v := range opts {
		var perr error
		switch k {
		case "n":
			n, perr = strconv.Atoi(v)
			if n < 1 {
				perr = errors.New("")
			}
		case "t":
			temp, perr = strconv.ParseFloat(v, 64)
		case "k":
			topK, perr = strconv.Atoi(v)
		case "p":
			topP, perr = strconv.ParseFloat(v, 64)
		case "seed":
			seed, perr = strconv.ParseUint(v, 10, 64)
		}
		if perr != nil {
			return usagef("-%s: bad value %q", k, v)
		}
	}
	prompt := strings.Join(pos, " ")
	prompt = strings.NewReplacer(`\n`, "\n", `\t`, "\t").Replace(prompt)
	text := prompt
	if text == "" {
		text = "\n" // no beginning-of-text token: start as after a line break
	}
	tok := s.run.Tokenizer()
	ids := tok.Encode(text)
	fmt.Fprint(s.stdout, prompt)
	count := 0
	start := time.Now()
	var out []int
	gerr := forge.Try(func() {
		out, err = s.run.Model().Generate(ids, gpt.GenerateOptions{
			MaxTokens: n, Sampling: gpt.Sampling{Temperature: temp, TopK: topK, TopP: topP}, Seed: seed,
			OnToken: func(id int) bool {
				count++
				// Decoding concatenates: each token's bytes can go out as
				// they come (a character split across tokens completes
				// with the next write).
				fmt.Fprint(s.stdout, tok.Decode([]int{id}))
				return ctx.Err() == nil
			},
		})
	})
	fmt.Fprintln(s.stdout)
	if gerr != nil {
		return gerr
	}
	if err != nil {
		return err
	}
	_ = out
	el := time.Since(start)
	fmt.Fprintf(s.stderr, "(%d tokens in %s, %s tok/s, seed %d)\n", count, el.Round(time.Millisecond), termplot.Kilo(float64(count)/math.Max(el.Seconds(), 1e-9)), seed)
	return nil
}
