// Command forge is Forge's command-line tool: train a GPT on the built-in
// corpus or your own text, sample from it, evaluate, inspect configs,
// prepare token files and export weights. Run `forge help` for the
// commands; package cli holds them.
package main

import (
	"os"

	"github.com/forgeml/forge/cli"
)

func main() { os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr)) }
