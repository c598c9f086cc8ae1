package notebook

import (
	"errors"
	"fmt"
	"html"
	"os"
	"runtime/debug"
	"strings"

	"github.com/forgeml/forge/forge"
)

// Recover, deferred at the top of a cell, turns a panic in the cell into
// one readable error output instead of a crash: GoNB would otherwise show
// only "exit status 2" in its error box, with the message lost in the
// stream above it. A forge error (a shape, dtype or device mistake) shows
// as its one-line message, "forge: matmul: inner dimensions differ: [2 3]
// @ [4 5]"; any other panic shows its value with the stack folded below
// it. The cell then ends normally. Outside a notebook the message goes to
// stderr.
//
//	defer notebook.Recover()
//	y := x.MatMul(w) // a mistake here is reported, not a crash
func Recover() {
	if r := recover(); r != nil {
		reportPanic("", r, debug.Stack())
	}
}

// catch is Recover for the package's own helpers: a panic while one of
// them runs (a bad argument, a forge error in the data it reads) is
// reported as one error output naming the helper, and the cell goes on.
func catch(helper string) {
	if r := recover(); r != nil {
		reportPanic(helper, r, debug.Stack())
	}
}

// reportPanic shows r, the value a panic carried, as one error output.
func reportPanic(helper string, r any, stack []byte) {
	var fe *forge.Error
	msg, detail := "", ""
	switch v := r.(type) {
	case *forge.Error:
		msg = v.Error()
	case error:
		if errors.As(v, &fe) {
			msg = fe.Error()
		} else {
			msg, detail = "panic: "+v.Error(), string(stack)
		}
	default:
		msg, detail = fmt.Sprintf("panic: %v", v), string(stack)
	}
	if helper != "" {
		msg = "notebook: " + helper + ": " + strings.TrimPrefix(msg, "notebook: ")
	}
	if !isNotebook() {
		fmt.Fprintln(os.Stderr, "error: "+msg)
		return
	}
	h := "<div class=\"forge-box forge-panic\">" + errorHTML(msg)
	if detail != "" {
		h += "<details><summary style=\"color:#777;font-size:12px\">stack</summary><pre style=\"font-size:11px\">" + html.EscapeString(detail) + "</pre></details>"
	}
	displayHTML(h + "</div>")
}
