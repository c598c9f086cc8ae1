// Command forge is Forge's command-line tool. Until the REPL lands, it has
// one job, the demo: it shows eager tensors, their printing and statistics,
// autograd through the ops a GPT uses, and a small model trained by hand.
//
//	forge            run the demo
//	forge demo       the same
//	forge version    print the version
package main

import (
	"os"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
