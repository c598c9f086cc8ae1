//go:build !linux && !darwin

package emu

import "errors"

const libAvailable = false

type lib struct{ path string }

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

func loadLib(path string) (*lib, error) {
	return nil, errors.New("metal-emu: not available on this system (needs linux or darwin)")
}

func (l *lib) run(L *launchArgs) int32  { return -1 }
func (l *lib) names() ([]string, error) { return nil, errors.New("metal-emu: unavailable") }
func (l *lib) switchCost(n int) float64 { return 0 }
