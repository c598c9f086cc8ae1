package emu

// Concurrent regions (driver.ConcurrentCommandBuffer). On a GPU the
// dispatches of a concurrent compute encoder between two barriers may run
// in any order or overlap; the emulator runs them one at a time, in the
// order of its schedule — as encoded under Forward, reversed under
// Reverse, shuffled under Random — so that a result that depends on their
// order differs between the schedules' test runs. Before running, it
// refuses a group in which one dispatch binds a buffer at the offset where
// another binds it and either may write it (a non-const device pointer):
// two kernels on one tensor with no barrier between.

import (
	"fmt"
	"math/rand/v2"

	"github.com/forgeml/forge/metal/driver"
)

var _ driver.ConcurrentCommandBuffer = (*cmdBuf)(nil)

func (c *cmdBuf) BeginConcurrent() {
	if c.committed {
		panic("metal-emu: BeginConcurrent after Commit")
	}
	if c.inRegion {
		panic("metal-emu: BeginConcurrent inside a concurrent region")
	}
	c.inRegion = true
	c.groups++
}

func (c *cmdBuf) Barrier() {
	if !c.inRegion {
		panic("metal-emu: Barrier outside a concurrent region")
	}
	c.groups++
}

func (c *cmdBuf) EndConcurrent() {
	if !c.inRegion {
		panic("metal-emu: EndConcurrent outside a concurrent region")
	}
	c.inRegion = false
}

// order is the order the dispatches run in under schedule s: encoding
// order, but each concurrent group reversed (Reverse) or shuffled
// (Random, from seed and the command buffer's size).
func (c *cmdBuf) order(s Schedule, seed uint64) []int {
	ord := make([]int, len(c.dispatches))
	for i := range ord {
		ord[i] = i
	}
	rng := rand.New(rand.NewPCG(seed, uint64(len(ord))))
	for i := 0; i < len(ord); {
		j := i + 1
		if g := c.group[i]; g != 0 {
			for j < len(ord) && c.group[j] == g {
				j++
			}
			run := ord[i:j]
			switch s {
			case Reverse:
				for a, b := 0, len(run)-1; a < b; a, b = a+1, b-1 {
					run[a], run[b] = run[b], run[a]
				}
			case Random:
				rng.Shuffle(len(run), func(a, b int) { run[a], run[b] = run[b], run[a] })
			}
		}
		i = j
	}
	return ord
}

// binding is one buffer argument of a dispatch in a group.
type binding struct {
	buf   *buffer
	off   int
	write bool
	disp  int
	param string
	index int
}

// checkRegions refuses a concurrent group with a buffer bound at one
// offset by two dispatches where either may write it.
func (c *cmdBuf) checkRegions() error {
	type groupBuf struct {
		g   int
		buf *buffer
	}
	seen := map[groupBuf][]binding{}
	for i, disp := range c.dispatches {
		g := c.group[i]
		if g == 0 {
			continue
		}
		p, ok := disp.Pipeline.(*pipeline)
		if !ok {
			continue // runOne says so
		}
		for _, prm := range p.kernel.Params {
			j := prm.BufferIndex
			if j < 0 || j >= len(disp.Args) || disp.Args[j].Buf == nil {
				continue
			}
			b, ok := disp.Args[j].Buf.(*buffer)
			if !ok {
				continue
			}
			nb := binding{buf: b, off: disp.Args[j].Offset, write: writable(prm), disp: i, param: prm.Name, index: j}
			key := groupBuf{g, b}
			for _, o := range seen[key] {
				if o.disp != i && o.off == nb.off && (o.write || nb.write) {
					w, r := o, nb
					if !w.write {
						w, r = r, w
					}
					return fmt.Errorf("metal-emu: concurrent region: %s writes [[buffer(%d)]] %s at byte %d of a buffer that %s binds there too ([[buffer(%d)]] %s) with no barrier between: they may run in either order or at once",
						c.label(w.disp), w.index, w.param, w.off, c.label(r.disp), r.index, r.param)
				}
			}
			seen[key] = append(seen[key], nb)
		}
	}
	return nil
}

func (c *cmdBuf) label(i int) string {
	if l := c.dispatches[i].Label; l != "" {
		return fmt.Sprintf("dispatch %d (%s)", i, l)
	}
	return fmt.Sprintf("dispatch %d", i)
}

// writable reports whether a kernel may write through parameter p: a
// device pointer or reference whose pointee is not const.
func writable(p Param) bool {
	if p.AddressSpace != "device" || !(p.Pointer || p.Ref) {
		return false
	}
	t := p.Type
	for i := 0; i < len(t); i++ {
		if t[i] == '*' || t[i] == '&' {
			t = t[:i]
			break
		}
	}
	for _, f := range splitWords(t) {
		if f == "const" {
			return false
		}
	}
	return true
}

func splitWords(s string) []string {
	var w []string
	start := -1
	for i := 0; i <= len(s); i++ {
		if i == len(s) || !isIdentChar(s[i]) {
			if start >= 0 {
				w = append(w, s[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	return w
}
