package rosetta

import "golang.org/x/sys/unix"

// Translated reports whether the process runs under Rosetta: the kernel's
// sysctl.proc_translated is 1 for a translated process, 0 for a native
// one, and absent (an error) on Intel Macs and macOS before 11.
func Translated() bool {
	v, err := unix.SysctlUint32("sysctl.proc_translated")
	return err == nil && v == 1
}
