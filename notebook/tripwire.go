package notebook

import (
	"fmt"
	"io"
	"os"

	"github.com/forgeml/forge/forge"
)

// Tripwire turns the NaN tripwire (forge.SetTripwire) on or off for the
// cell and says so in one line. With it on, Train stops at the first
// kernel that makes a NaN or ±Inf and the dashboard shows the error
// naming the kernel, its shapes, the module scope, the parameter and the
// step, which was not applied. Every GoNB cell is a new process: call it
// in each cell that should check, before Train.
func Tripwire(on bool) { tripwireTo(os.Stdout, on) }

func tripwireTo(w io.Writer, on bool) {
	forge.SetTripwire(on)
	if on {
		fmt.Fprintln(w, "tripwire on: every kernel's output is checked for NaN and ±Inf (training runs about 1.6× slower)")
		return
	}
	fmt.Fprintln(w, "tripwire off")
}
