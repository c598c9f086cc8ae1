//go:build darwin && arm64

package metal

import "github.com/ebitengine/purego/objc"

var selWorkingSet = objc.RegisterName("recommendedMaxWorkingSetSize")

// RecommendedWorkingSet is the device's recommendedMaxWorkingSetSize
// (uint64 bytes).
func (d *metalDriver) RecommendedWorkingSet() int64 {
	var n uintptr
	withPool(func() { n = msg(d.dev, selWorkingSet) })
	return int64(n)
}
