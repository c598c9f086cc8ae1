// Package cli is the `forge` command line: one table of commands, each a
// function from arguments to an exit status, testable without a process.
//
// Every command reports bad arguments and bad files as one line on stderr
// ("forge train: …") and exits non-zero: 2 for usage errors, 1 for
// failures. Long work shows progress on stderr; results go to stdout.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	// The devices --device and FORGE_BACKEND can name besides cpu: metal (macOS on
	// Apple silicon) and metal-emu (the Metal kernels on the CPU).
	"github.com/forgeml/forge/forge"
	_ "github.com/forgeml/forge/forge/backends" // cpu and metal
)

// Version is the tool's version.
const Version = "0.1.0-dev"

// env is what a command sees of the world.
type env struct {
	stdout, stderr io.Writer
	stdin          io.Reader
	interrupt      <-chan os.Signal // nil: commands install their own handler
	noticed        bool             // the device notice is printed
}

type command struct {
	name, args, summary string
	run                 func(e *env, args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"repl", replArgs, "interactive training: step, inspect, sample, plot and profile a run; Go against the library", cmdRepl},
		{"train", "[--config tiny] [--run dir] [--steps n] [--data file.txt …]", "train a GPT (resumes the run directory if it exists)", cmdTrain},
		{"generate", "[--run dir] [--prompt text] [-n 200] [--temperature 0.8] [--top-k 40] [--top-p 0.95]", "sample text from a trained run", cmdGenerate},
		{"eval", "[--run dir] [--batches n]", "validation loss and perplexity of a run", cmdEval},
		{"info", "[--config name | --run dir]", "parameters, FLOPs and memory of a config", cmdInfo},
		{"prepare", "--out dir [--vocab 4096] [--tokenizer bpe|char] file.txt …", "train a tokenizer and write llm.c token files", cmdPrepare},
		{"export", "[--run dir] --out dir [--format hf|forge] [--dtype float32|float16|bfloat16] [--message m] [--quant [--quant-mode int8|ternary]] [--allow-older]", "write Hugging Face / PyTorch loadable weights, quantised weights, or a .forge repository revision", cmdExport},
		{"model", modelArgs, "inspect, verify, check out and convert .forge model repositories", cmdModel},
		{"check", "[--run dir]", "verify a run directory: checkpoints, token files, metrics, lock, leftovers", cmdCheck},
		{"bench", benchArgs, "time a kernel or a training step (%timeit style); profile a step", cmdBench},
		{"doctor", doctorArgs, "check this machine's device against the CPU and write a report to attach to a bug report", cmdDoctor},
		{"demo", "[--device d]", "a tour of tensors, autograd and the GPT ops", cmdDemo},
		{"version", "", "print the version", func(e *env, _ []string) error {
			fmt.Fprintln(e.stdout, "forge", Version)
			return nil
		}},
		{"help", "[command]", "list the commands, or describe one", cmdHelp},
	}
}

// usageError marks an error in the arguments (exit status 2).
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// Run executes the command line args and returns the exit status.
func Run(args []string, stdout, stderr io.Writer) int {
	return run(&env{stdout: stdout, stderr: stderr, stdin: os.Stdin}, args)
}

func run(e *env, args []string) int {
	name := "demo"
	if len(args) > 0 {
		name, args = args[0], args[1:]
	}
	switch name {
	case "--version", "-v":
		name = "version"
	case "--help", "-h":
		name = "help"
	}
	for _, c := range commands {
		if c.name == name {
			defer forge.OnCompile(forge.OnCompile(compileNotice(e.stderr)))
			err := c.run(e, args)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			}
			var x exitStatus
			if errors.As(err, &x) {
				return int(x)
			}
			fmt.Fprintf(e.stderr, "forge %s: %s\n", name, oneLine(err))
			var u usageError
			if errors.As(err, &u) {
				return 2
			}
			return 1
		}
	}
	fmt.Fprintf(e.stderr, "forge: unknown command %q; run 'forge help' for the list\n", name)
	return 2
}

// compileNotice prints a device's kernel-compile reports (those of a
// compile that takes over a second) on w, one line each.
func compileNotice(w io.Writer) func(forge.CompileProgress) {
	return func(p forge.CompileProgress) { fmt.Fprintln(w, p) }
}

// oneLine keeps an error on one line.
func oneLine(err error) string {
	s := strings.TrimSpace(err.Error())
	s = strings.TrimPrefix(s, "forge: ")
	return strings.ReplaceAll(s, "\n", "; ")
}

func cmdHelp(e *env, args []string) error {
	if len(args) == 1 {
		for _, c := range commands {
			if c.name == args[0] {
				fmt.Fprintf(e.stdout, "usage: forge %s %s\n\n%s\n", c.name, c.args, c.summary)
				if c.name != "help" && c.name != "version" {
					fmt.Fprintln(e.stdout)
					c.run(&env{stdout: e.stdout, stderr: e.stdout}, []string{"-h"})
				}
				return nil
			}
		}
		return usagef("no command %q; run 'forge help' for the list", args[0])
	}
	fmt.Fprintf(e.stdout, "forge %s — train small language models\n\nusage: forge <command> [arguments]\n\n", Version)
	w := 0
	for _, c := range commands {
		w = max(w, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(e.stdout, "  %-*s  %s\n", w, c.name, c.summary)
	}
	fmt.Fprintln(e.stdout, "\nRun 'forge help <command>' for its arguments. With no command, forge runs the demo.")
	fmt.Fprintln(e.stdout, "The commands that compute (all but prepare and check) take --device cpu|metal|metal-emu;\n"+
		"the default is FORGE_BACKEND, else metal on Apple silicon when it opens, else cpu.")
	return nil
}

// flags returns a flag set whose errors come back as usage errors and
// whose -h output goes to stderr.
func flags(e *env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("forge "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// parse parses args, turning flag errors into usage errors. Flags may
// follow positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(out)
				fmt.Fprintln(out, "flags:")
				fs.PrintDefaults()
				return nil, err
			}
			return nil, usagef("%v (see 'forge help %s')", err, strings.TrimPrefix(fs.Name(), "forge "))
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
