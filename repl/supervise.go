package repl

// The supervisor. Go cannot recover a panic in a goroutine the user
// starts (`go func(){ panic("x") }()`) or a stack overflow: the process
// ends. So `forge repl` runs as two processes: the parent only
// supervises, and a child — the same binary re-executed with ChildEnv
// set — owns the session, inheriting stdin, stdout and stderr. When the
// child dies abnormally the parent says what happened in one line,
// restores the terminal and starts a new child, which reopens the run at
// its last saved step and says what was lost: the Go variables and the
// steps since the last save. Nothing saved is lost; nothing is replayed.
//
// The child tells the parent what it holds through a directory the
// parent makes: state.json (the open run, its step, the Go names
// defined), rewritten after each input, and crash.txt, where the Go
// runtime writes the fatal error (runtime/debug.SetCrashOutput). The
// parent leaves restart.json there for the next child.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/chzyer/readline"

	"github.com/forgeml/forge/forge/train"
)

// ChildEnv names the environment variable that marks a supervised child:
// its value is the directory it shares with its supervisor.
const ChildEnv = "FORGE_REPL_CHILD"

// childState is what a child last said it holds (state.json).
type childState struct {
	Dir  string   `json:"dir"`  // the open run ("" : none)
	Step int      `json:"step"` // its step count after the last input
	Vars []string `json:"vars"` // Go names the user defined
}

// RestartNote is what a restarted child is told about the one before it.
type RestartNote struct {
	Why     string   `json:"why"`     // the first line of the fatal error
	Dir     string   `json:"dir"`     // the run to reopen ("" : none was open)
	Reached int      `json:"reached"` // the step the run had reached
	Vars    []string `json:"vars"`    // the Go names that are gone
}

// restarted: this process took over from a session that died.
var restarted bool

// Child reports whether this process is a supervised child. If so it
// sends the runtime's fatal errors to the shared directory for the
// supervisor, and returns the note left by the supervisor when this child
// replaces one that died (nil on the first start).
func Child() (ok bool, note *RestartNote) {
	dir := os.Getenv(ChildEnv)
	if dir == "" {
		return false, nil
	}
	if f, err := os.OpenFile(filepath.Join(dir, "crash.txt"), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600); err == nil {
		debug.SetCrashOutput(f, debug.CrashOptions{})
		f.Close() // SetCrashOutput keeps its own duplicate
	}
	b, err := os.ReadFile(filepath.Join(dir, "restart.json"))
	if restarted = err == nil; restarted {
		os.Remove(filepath.Join(dir, "restart.json"))
		note = &RestartNote{}
		if json.Unmarshal(b, note) != nil {
			note = nil
		}
	}
	return true, note
}

// reportState writes the session's state for the supervisor (a no-op
// unless this process is a supervised child).
func (s *Session) reportState() {
	dir := os.Getenv(ChildEnv)
	if dir == "" {
		return
	}
	st := childState{}
	if s.run != nil {
		st.Dir, st.Step = s.run.Dir(), s.run.Trainer().StepCount()
	}
	if s.goi != nil {
		for n := range s.goi.names {
			switch n {
			case "model", "tr", "run", "ctx", "ans":
				continue
			}
			if !strings.HasPrefix(n, "__") {
				st.Vars = append(st.Vars, n)
			}
		}
		slices.Sort(st.Vars)
	}
	b, _ := json.Marshal(st)
	tmp := filepath.Join(dir, "state.json.tmp")
	if os.WriteFile(tmp, b, 0o600) == nil {
		os.Rename(tmp, filepath.Join(dir, "state.json"))
	}
}

// SayRestarted tells the user, after a restarted child reopened its run,
// what the crash took: the Go variables, and the steps since the last
// save.
func (s *Session) SayRestarted(n *RestartNote) {
	var lost []string
	if len(n.Vars) > 0 {
		lost = append(lost, "the Go variables "+strings.Join(n.Vars, ", "))
	}
	kept := ""
	if s.run != nil {
		at := s.run.Trainer().StepCount()
		if n.Reached > at {
			lost = append(lost, fmt.Sprintf("steps %d–%d (not saved)", at+1, n.Reached))
		}
		kept = fmt.Sprintf("; the run is back at step %d, its last save", at)
	}
	what := "nothing"
	if len(lost) > 0 {
		what = strings.Join(lost, " and ")
	}
	fmt.Fprintf(s.stderr, "forge repl: restarted; lost %s%s\n", what, kept)

}

// byteReader reads one byte at a time, so that a child never takes from a
// shared input (a pipe, a file) more than the line it is evaluating: the
// next child goes on from the next line.
type byteReader struct{ r io.Reader }

func (b byteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return b.r.Read(p)
}

// Supervise runs the REPL as a child process (this executable with args
// and ChildEnv set) and restarts it when it dies of a panic, a fatal
// runtime error or a signal it did not ask for; it returns the child's
// exit status when it leaves by itself (:quit, end of input, a second
// Ctrl-C) and 1 when it cannot start one or the child keeps dying at
// once.
func Supervise(args []string, stdin, stdout, stderr *os.File) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "forge repl: cannot find this program to start the session: %v\n", err)
		return 1
	}
	shared, err := os.MkdirTemp("", "forge-repl-")
	if err != nil {
		fmt.Fprintf(stderr, "forge repl: %v\n", err)
		return 1
	}
	defer os.RemoveAll(shared)
	// Ctrl-C reaches the child from the terminal: the parent does not
	// pass it on then (it is caught through Notify, not signal.Ignore,
	// which the child would inherit), only a SIGINT sent to the parent
	// alone. SIGTERM and SIGHUP are passed on, and the parent then leaves.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var tty *readline.State
	if IsTerminal(stdin) {
		tty, _ = readline.GetState(int(stdin.Fd()))
	}
	env := append(os.Environ(), ChildEnv+"="+shared)
	if os.Getenv("GOTRACEBACK") == "" {
		env = append(env, "GOTRACEBACK=none") // one message, not a dump of the interpreter's goroutines
	}
	quick := 0 // consecutive deaths soon after starting
	for {
		os.Remove(filepath.Join(shared, "crash.txt"))
		cmd := exec.Command(exe, args...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = stdin, stdout, stderr, env
		start := time.Now()
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(stderr, "forge repl: cannot start the session: %v\n", err)
			return 1
		}
		done := make(chan struct{})
		leaving := make(chan os.Signal, 1)
		go func() {
			for {
				select {
				case sig := <-sigs:
					if sig == os.Interrupt {
						if !interruptReachesChild() { // kill -INT on the supervisor
							cmd.Process.Signal(sig)
						}
					} else {
						cmd.Process.Signal(sig)
						select {
						case leaving <- sig:
						default:
						}
					}
				case <-done:
					return
				}
			}
		}()
		err := cmd.Wait()
		close(done)
		if tty != nil {
			readline.Restore(int(stdin.Fd()), tty)
		}
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			fmt.Fprintf(stderr, "forge repl: %v\n", err)
			return 1
		}
		select {
		case <-leaving:
			return exitCode(cmd.ProcessState)
		default:
		}
		why := crashReason(filepath.Join(shared, "crash.txt"), cmd.ProcessState)
		if why == "" {
			return exitCode(cmd.ProcessState)
		}
		fmt.Fprintf(stderr, "\nforge repl: the session died (%s); starting it again\n", why)
		if time.Since(start) < 3*time.Second {
			if quick++; quick >= 3 {
				fmt.Fprintln(stderr, "forge repl: it died three times as it started; giving up")
				return 1
			}
		} else {
			quick = 0
		}
		writeNote(shared, why)
	}
}

// exitCode is a child's exit status, 128 + the signal's number for one
// ended by a signal, as a shell reports it.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// crashReason is the first line of a child's fatal error ("" if it left
// by itself).
func crashReason(crash string, ps *os.ProcessState) string {
	if b, err := os.ReadFile(crash); err == nil && len(b) > 0 {
		first := ""
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			l := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
				// The interpreter re-panics a goroutine's panic: the
				// user's message is what matters.
				l = strings.TrimSuffix(l, " [recovered, repanicked]")
				return strings.TrimSuffix(l, " [recovered]")
			}
			if first == "" {
				first = l
			}
		}
		// A stack overflow's header goes to stderr only; its trace starts
		// in the runtime's stack growth.
		if strings.Contains(string(b), "\nruntime.newstack(") {
			return "fatal error: stack overflow"
		}
		if first != "" {
			return first
		}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() != syscall.SIGINT {
		why := "killed by signal " + ws.Signal().String()
		if ws.Signal() == syscall.SIGKILL {
			why += ", perhaps for running out of memory"
		}
		return why
	}
	return ""
}

// writeNote leaves the next child the run to reopen, the step its
// predecessor had reached and the names it had defined.
func writeNote(shared, why string) {
	var st childState
	if b, err := os.ReadFile(filepath.Join(shared, "state.json")); err == nil {
		json.Unmarshal(b, &st)
	}
	n := RestartNote{Why: why, Dir: st.Dir, Reached: st.Step, Vars: st.Vars}
	if st.Dir != "" {
		// Training records every step as it goes: a crash during :run
		// reached further than the state written before it.
		n.Reached = max(n.Reached, lastLoggedStep(filepath.Join(st.Dir, train.MetricsFile)))
	}
	b, _ := json.Marshal(n)
	os.WriteFile(filepath.Join(shared, "restart.json"), b, 0o600)
}

// lastLoggedStep is the step of the last complete line of a run's metrics
// log (0 if none).
func lastLoggedStep(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var m struct {
			Step *int `json:"step"`
		}
		if json.Unmarshal([]byte(lines[i]), &m) == nil && m.Step != nil {
			return *m.Step
		}
	}
	return 0
}
