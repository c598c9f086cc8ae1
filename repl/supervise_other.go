//go:build !unix

package repl

// interruptReachesChild: without process groups, assume Ctrl-C reaches
// every process on the console.
func interruptReachesChild() bool { return true }
