package backend

// Layout is k views of one shape with their dimensions coalesced, the
// form elementwise kernels iterate over: dimensions of size 1 dropped and
// adjacent dimensions merged wherever every view's strides allow, so a
// contiguous view becomes one dimension. Row-major order is kept, so a
// flat index over Shape visits the elements in the views' order.
type Layout struct {
	Shape   []int   // coalesced shape, at least one dimension
	Strides [][]int // Strides[v][d] of view v
	Offsets []int   // Offsets[v]: view v's element offset
}

// Coalesce returns the Layout of views, which all share views[0].Shape.
func Coalesce(views ...View) Layout {
	shape := views[0].Shape
	k := len(views)
	l := Layout{Strides: make([][]int, k), Offsets: make([]int, k)}
	for v := range views {
		l.Offsets[v] = views[v].Offset
	}
	for d := range shape {
		if shape[d] == 1 {
			continue
		}
		n := len(l.Shape)
		merge := n > 0
		for v := 0; merge && v < k; v++ {
			if l.Strides[v][n-1] != views[v].Strides[d]*shape[d] {
				merge = false
			}
		}
		if merge {
			l.Shape[n-1] *= shape[d]
			for v := range views {
				l.Strides[v][n-1] = views[v].Strides[d]
			}
			continue
		}
		l.Shape = append(l.Shape, shape[d])
		for v := range views {
			l.Strides[v] = append(l.Strides[v], views[v].Strides[d])
		}
	}
	if len(l.Shape) == 0 {
		l.Shape = []int{1}
		for v := range views {
			l.Strides[v] = []int{1}
		}
	}
	return l
}
