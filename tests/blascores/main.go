// Command blascores prints, space-separated, the OpenBLAS cores this CPU
// can execute (cpu.BLASCores), for `make test` to run the BLAS and
// conformance suites under each: on one machine, every machine whose
// OpenBLAS would pick one of them.
package main

import (
	"fmt"
	"strings"

	"github.com/forgeml/forge/forge/cpu"
)

func main() { fmt.Println(strings.Join(cpu.BLASCores(), " ")) }
