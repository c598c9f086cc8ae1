package profile

import "golang.org/x/sys/unix"

func readCPUModel() (string, error) { return unix.Sysctl("machdep.cpu.brand_string") }
