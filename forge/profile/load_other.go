//go:build !linux

package profile

// otherLoad reports -1 (unknown): only Linux says how busy the CPUs are.
func otherLoad() func() float64 { return func() float64 { return -1 } }
