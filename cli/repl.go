package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/repl"
)

// replArgs is the argument summary of `forge repl` in the command table.
const replArgs = "[run-dir] [--config tiny] [--data file.txt …] [--history file] [--device d]"

// cmdRepl opens (or creates) a run directory and reads inputs: with line
// editing, history and completion on a terminal, plain lines otherwise
// (`forge repl < script.forge`).
func cmdRepl(e *env, args []string) error {
	fs := flags(e, "repl")
	config := fs.String("config", "", "config of a new run: "+strings.Join(configNames(), ", ")+" or a .json file (default tiny)")
	history := fs.String("history", repl.DefaultHistoryFile(), "input history file (\"\": none)")
	noOpen := fs.Bool("no-open", false, "start with no run open (:open or :new one)")
	device := deviceFlag(fs)
	var dataFiles multiFlag
	fs.Var(&dataFiles, "data", "a text file for a new run (repeatable), or a directory from forge prepare (default: the built-in corpus)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("give at most one run directory, got %s", strings.Join(pos, " "))
	}
	child, note := repl.Child()
	if !child && e.stdin == os.Stdin && e.stdout == os.Stdout && e.stderr == os.Stderr && e.interrupt == nil {
		// The session runs in a child process this one restarts if it
		// dies of what Go cannot recover (repl.Supervise).
		return exitStatus(repl.Supervise(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if note != nil { // reopen what the session that died had open
		pos, *noOpen, *config, dataFiles = nil, note.Dir == "", "", nil
		if note.Dir != "" {
			pos = []string{note.Dir}
		}
	}
	if err := e.useDevice(*device); err != nil {
		return err
	}
	stdin, _ := e.stdin.(*os.File)
	tty := stdin != nil && repl.IsTerminal(stdin) && isTerminalWriter(e.stdout)
	opts := repl.Options{Live: tty && isTerminalWriter(e.stderr)}
	if tty {
		opts.Width = repl.TerminalWidth
	}
	s, err := repl.NewSession(e.stdout, e.stderr, opts)
	if err != nil {
		return err
	}
	defer s.Close()
	if !*noOpen {
		dir := ""
		if len(pos) == 1 {
			dir = pos[0]
		} else {
			name := "tiny"
			if *config != "" {
				cfg, err := train.LoadConfig(*config)
				if err != nil {
					return err
				}
				name = cfg.Name
			}
			dir = filepath.Join("runs", name)
		}
		if err := s.Open(dir, *config, dataFiles); err != nil {
			// The REPL starts anyway: :open or :new can follow.
			fmt.Fprintf(e.stderr, "error: %s\n", repl.OneLine(err))
		}
	}
	if note != nil {
		s.SayRestarted(note)
	}
	if tty {
		fmt.Fprintln(e.stdout, "forge repl — :help lists the commands, Tab completes, Ctrl-C interrupts, Ctrl-D leaves")
		return s.RunTerminal(repl.TerminalOptions{Stdin: stdin, Stdout: e.stdout, Stderr: e.stderr, HistoryFile: *history})
	}
	in := e.stdin
	if in == nil {
		in = strings.NewReader("")
	}
	if err := s.RunLines(in); err != nil {
		if errors.Is(err, repl.ErrInputFailed) {
			return errors.New("an input failed (see the errors above)")
		}
		return err
	}
	return nil
}

func isTerminalWriter(w any) bool {
	f, ok := w.(*os.File)
	return ok && repl.IsTerminal(f)
}

// exitStatus is an error that makes forge exit with that status, saying
// nothing more (a supervised REPL's child has said what there was to say).
type exitStatus int

func (x exitStatus) Error() string { return "exit status " + strconv.Itoa(int(x)) }
