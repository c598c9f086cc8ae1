package backend

import "fmt"

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

// BatchStrides returns the strides of x's batch dimensions (all but its
// last two, a matrix's) aligned to the nb leading batch dimensions of
// dst: 0 where x broadcasts (a size-1 or missing leading dimension). It
// returns an error naming the shapes when x has more batch dimensions than
// dst or one that does not broadcast. The matmul kernels of every backend
// use it.
func BatchStrides(x View, dst []int, nb int) ([]int, error) {
	xb := len(x.Shape) - 2
	if xb > nb {
		return nil, fmt.Errorf("operand %v has more batch dims than dst %v", x.Shape, dst)
	}
	st := make([]int, nb)
	for d := 0; d < xb; d++ {
		dd := nb - xb + d
		switch {
		case x.Shape[d] == dst[dd]:
			st[dd] = x.Strides[d]
		case x.Shape[d] == 1:
			st[dd] = 0
		default:
			return nil, fmt.Errorf("batch dims of %v do not broadcast to dst %v", x.Shape, dst)
		}
	}
	return st, nil
}

// SplitAxis returns (P, S, Q) for shape around axis: the products of the
// dimensions before it, its size, and the product of those after it (the
// three groups the index kernels see).
func SplitAxis(shape []int, axis int) (p, s, q int) {
	p, q = 1, 1
	for _, d := range shape[:axis] {
		p *= d
	}
	for _, d := range shape[axis+1:] {
		q *= d
	}
	return p, shape[axis], q
}
