package emu

// launchArgs mirrors struct Launch of runtime.cpp.
type launchArgs struct {
	kernel    int64
	threads   int64
	schedule  int64
	seed      uint64
	groups    [3]uint32
	tg        [3]uint32
	args      uintptr
	nargs     int64
	consts    uintptr
	nconsts   int64
	err       uintptr
	errcap    int64
	rounds    int64
	switches  int64
	faultAddr uint64
	timeoutMS int64
}
