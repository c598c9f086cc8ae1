// Package repl is Forge's interactive front end: a session that trains,
// inspects, samples, plots and profiles a run directory one input at a
// time, and evaluates Go against the library.
//
//	s, _ := repl.NewSession(os.Stdout, os.Stderr, repl.Options{})
//	s.Open("runs/tiny", "tiny", nil)
//	err := s.Eval(":step 5")      // a meta-command
//	err = s.Eval("model.Wte.Weight.Stats()") // Go, evaluated by yaegi
//
// # Inputs
//
// An input starting with ':' is a meta-command from one table (commands.go)
// whose documentation drives :help and completion. An input starting with
// '?' asks for documentation (?forge.Ones, ?model, ?:run). Anything else is
// Go: statements and expressions evaluated by yaegi against the exported
// API of the library (the tables in repl/symbols, made by go generate).
// The open run is bound to run (*train.Session), its model to model
// (*gpt.Model) and its trainer to tr (*train.Trainer); ctx is cancelled by
// Ctrl-C, for long calls made from Go (run.Train(ctx, 100)). The value of
// an expression is printed and bound to ans.
//
// # Errors
//
// Eval returns an error for anything that goes wrong, and the session stays
// usable: a bad command or argument, a Go syntax or type error, a panic in
// interpreted or library code (forge's misuse panics included), a missing
// file. The loop prints each as one line. Two sentinel errors are control
// flow: ErrContinue (the input is incomplete Go: more lines are needed) and
// ErrQuit.
//
// # Interrupts
//
// EvalContext's ctx interrupts the running command at a safe point:
// training stops at a step boundary and saves, sampling and benchmarks stop
// between tokens or runs, interpreted Go stops at its next statement. A
// compiled library call made from Go runs to its end unless it takes ctx.
//
// Nothing here trains, samples or measures by itself: every command calls
// forge/train, forge/gpt, forge/nn and forge/profile.
package repl
