//go:build !linux && !darwin

package emu

import "errors"

const libAvailable = false

type lib struct{ path string }

func loadLib(path string) (*lib, error) {
	return nil, errors.New("metal-emu: not available on this system (needs linux or darwin)")
}

func (l *lib) run(L *launchArgs) int32    { return -1 }
func (l *lib) names() ([]string, error)   { return nil, errors.New("metal-emu: unavailable") }
func (l *lib) switchCost(n int) float64   { return 0 }
func (l *lib) paramSize(k, index int) int { return -1 }
func (l *lib) tgBytes(k int) int          { return -1 }
