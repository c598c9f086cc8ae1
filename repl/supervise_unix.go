//go:build unix

package repl

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// interruptReachesChild reports whether a SIGINT this process receives
// reached the child too: true when the process is in the foreground of
// its controlling terminal, where Ctrl-C signals the whole group; false
// when there is no terminal, or the signal came from kill.
func interruptReachesChild() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false
	}
	defer tty.Close()
	pg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && pg == syscall.Getpgrp()
}
