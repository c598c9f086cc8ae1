package metal

// RMSNorm, LayerNorm and their backward (ops_norm.go) against the CPU
// backend, on sizes that hit every path: rows of one simdgroup and of a
// threadgroup, short rows (C < 32) and long ones (C > 4096), several row
// blocks for the weight gradients, absent weights and biases, NaN and ±Inf
// in rows; with float16 and bfloat16 views, every combination of a float32
// or 16-bit x, y (dy) and w (b, dw, db); bit-identical results across
// thread schedules; the refused dtype combinations.
//
// Each 16-bit case runs three times from the same values: the call under
// test (16-bit views as given), the float32 kernels on the device with
// every 16-bit input widened (the "float32 twin"), and the CPU backend on
// those widened inputs. Two checks per output (check16,
// ops_layout_test.go):
//
//   - Exact: the 16-bit kernels compute in float32 operation for operation
//     as the float32 kernels do, so a float32 output (rstd, mean, a float32
//     y or dx) has the twin's bits, and a 16-bit output is the twin's value
//     rounded once to nearest even on the host (forge/half). This catches
//     a wrong load or store type, a double rounding or a lost compensation
//     bit for bit. Required on the emulator; on a GPU logged (its compiler
//     may contract the two instances differently).
//   - Against the CPU: the twin is within the float32 tests' tolerance
//     opsTol·max(1, |want|) of the CPU's float32 result, and rounding once
//     moves a value by at most half a unit in the last place of the 16-bit
//     format, so a 16-bit output must lie within
//     ulp16(max(|got|, |want|))/2 + opsTol·max(1, |want|) of it, a float32
//     output within opsTol·max(1, |want|). The worst error is logged as a
//     fraction of that bound.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

// nfNormShapes are (N, C) pairs: one simdgroup per row (C ≤ 512) with a
// partial last threadgroup, a threadgroup per row (C > 512), C < 32, C = 1.
var nfNormShapes = [][2]int{{1, 1}, {3, 8}, {13, 5}, {9, 33}, {5, 512}, {4, 513}, {3, 1000}, {2, 4099}, {70, 64}}

// nfNoView is an absent optional operand.
var nfNoView = pair{}

// optView is p's view picked by pick, or an absent view for an absent p.
func optView(p pair, pick func(pair) backend.View) backend.View {
	if p.dev.Buf == nil {
		return backend.View{}
	}
	return pick(p)
}

func TestOpsRMSNorm(t *testing.T) {
	e := newOpsEnv(t)
	worstF, worstB := 0.0, 0.0
	for _, sh := range nfNormShapes {
		n, c := sh[0], sh[1]
		for _, withW := range []bool{true, false} {
			x := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 2 * e.rng.NormFloat64() })
			w := nfNoView
			if withW {
				w = e.newPair(backend.Float32, contig(c), e.uniform(0.5, 1.5))
			}
			y := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 7 })
			rstd := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.RMSNorm(v(y), v(rstd), v(x), optView(w, v), 1e-6)
			})
			what := fmt.Sprintf("rms_norm %dx%d w=%v", n, c, withW)
			worstF = max(worstF, e.compare(what+" y", y, opsTol), e.compare(what+" rstd", rstd, opsTol))

			// Backward from the CPU's rstd on both.
			rs := e.nfHostCopy(rstd)
			dy := e.newPair(backend.Float32, contig(n, c), e.normal)
			dx := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 7 })
			for _, withDW := range []bool{true, false} {
				dw := nfNoView
				if withDW {
					dw = e.newPair(backend.Float32, contig(c), func(int) float64 { return 7 })
				}
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.RMSNormBackward(v(dx), optView(dw, v), v(dy), v(x), optView(w, v), v(rs))
				})
				what := fmt.Sprintf("rms_norm_backward %dx%d w=%v dw=%v", n, c, withW, withDW)
				worstB = max(worstB, e.compare(what+" dx", dx, opsTol))
				if withDW {
					worstB = max(worstB, e.compare(what+" dw", dw, opsTol))
				}
			}
		}
	}
	t.Logf("rms_norm maxdiff: forward %.2e, backward %.2e", worstF, worstB)
}

// nfHostCopy is a fresh pair holding the CPU's contents of p (so that a
// backward reads the same saved statistics on both devices).
func (e *opsEnv) nfHostCopy(p pair) pair {
	h := make([]float32, p.n)
	e.ref.Read(p.ref.Buf, h)
	s := vspec{shape: p.dev.Shape, strides: p.dev.Strides, off: p.dev.Offset}
	return e.newPair(backend.Float32, s, func(i int) float64 { return float64(h[i]) })
}

func TestOpsLayerNorm(t *testing.T) {
	e := newOpsEnv(t)
	worstF, worstB := 0.0, 0.0
	for _, sh := range nfNormShapes {
		n, c := sh[0], sh[1]
		for mode := 0; mode < 4; mode++ { // bit 0: w, bit 1: b
			withW, withB := mode&1 != 0, mode&2 != 0
			shift := 0.0
			if mode == 3 {
				shift = 1000 // a mean far from zero against a spread of 1
			}
			x := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return shift + e.rng.NormFloat64() })
			w, bias := nfNoView, nfNoView
			if withW {
				w = e.newPair(backend.Float32, contig(c), e.uniform(0.5, 1.5))
			}
			if withB {
				bias = e.newPair(backend.Float32, contig(c), e.normal)
			}
			y := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 7 })
			mean := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
			rstd := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.LayerNorm(v(y), v(mean), v(rstd), v(x), optView(w, v), optView(bias, v), 1e-5)
			})
			what := fmt.Sprintf("layer_norm %dx%d w=%v b=%v shift=%v", n, c, withW, withB, shift)
			worstF = max(worstF, e.compare(what+" y", y, opsTol), e.compare(what+" mean", mean, opsTol),
				e.compare(what+" rstd", rstd, opsTol))

			mu, rs := e.nfHostCopy(mean), e.nfHostCopy(rstd)
			dy := e.newPair(backend.Float32, contig(n, c), e.normal)
			dx := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 7 })
			for grads := 0; grads < 4; grads++ {
				dw, db := nfNoView, nfNoView
				if grads&1 != 0 {
					dw = e.newPair(backend.Float32, contig(c), func(int) float64 { return 7 })
				}
				if grads&2 != 0 {
					db = e.newPair(backend.Float32, contig(c), func(int) float64 { return 7 })
				}
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.LayerNormBackward(v(dx), optView(dw, v), optView(db, v), v(dy), v(x), optView(w, v), v(mu), v(rs))
				})
				what := fmt.Sprintf("layer_norm_backward %dx%d w=%v shift=%v dw=%v db=%v", n, c, withW, shift, grads&1 != 0, grads&2 != 0)
				worstB = max(worstB, e.compare(what+" dx", dx, opsTol))
				if dw.dev.Buf != nil {
					worstB = max(worstB, e.compare(what+" dw", dw, opsTol))
				}
				if db.dev.Buf != nil {
					worstB = max(worstB, e.compare(what+" db", db, opsTol))
				}
			}
		}
	}
	// Without saved statistics (nil mean and rstd).
	x := e.newPair(backend.Float32, contig(6, 40), e.normal)
	y := e.newPair(backend.Float32, contig(6, 40), func(int) float64 { return 7 })
	y2 := e.newPair(backend.Float32, contig(6, 40), func(int) float64 { return 7 })
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.LayerNorm(v(y), backend.View{}, backend.View{}, v(x), backend.View{}, backend.View{}, 1e-5)
		be.RMSNorm(v(y2), backend.View{}, v(y), backend.View{}, 1e-5)
	})
	e.compare("layer_norm without saved stats", y, opsTol)
	e.compare("rms_norm without saved stats", y2, opsTol)
	t.Logf("layer_norm maxdiff: forward %.2e, backward %.2e", worstF, worstB)
}

// TestOpsNormParamGradBlocks covers weight gradients over many row blocks
// (a short last block) and over no rows at all (zeros).
func TestOpsNormParamGradBlocks(t *testing.T) {
	e := newOpsEnv(t)
	for _, sh := range [][2]int{{3001, 8}, {40, 4099}, {1030, 70}, {0, 9}} {
		n, c := sh[0], sh[1]
		nb, rb := normBlocking(n, c)
		x := e.newPair(backend.Float32, contig(n, c), e.normal)
		dy := e.newPair(backend.Float32, contig(n, c), e.normal)
		mu := e.newPair(backend.Float32, contig(n), e.normal)
		rs := e.newPair(backend.Float32, contig(n), e.uniform(0.5, 2))
		dw := e.newPair(backend.Float32, contig(c), func(int) float64 { return 7 })
		db := e.newPair(backend.Float32, contig(c), func(int) float64 { return 7 })
		dw2 := e.newPair(backend.Float32, contig(c), func(int) float64 { return 7 })
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.LayerNormBackward(backend.View{}, v(dw), v(db), v(dy), v(x), backend.View{}, v(mu), v(rs))
			be.RMSNormBackward(backend.View{}, v(dw2), v(dy), v(x), backend.View{}, v(rs))
		})
		what := fmt.Sprintf("%dx%d (%d blocks of %d rows)", n, c, nb, rb)
		// The sums are compensated end to end (products, partials, total):
		// within an ulp or two of the CPU's float64 sums.
		const tol = 2.5e-7
		wW := e.compare("layer_norm dw "+what, dw, tol)
		wB := e.compare("layer_norm db "+what, db, tol)
		wR := e.compare("rms_norm dw "+what, dw2, tol)
		t.Logf("param grads %s: maxdiff dw %.2e db %.2e rms dw %.2e", what, wW, wB, wR)
	}
}

// TestOpsNormSpecialValues feeds rows holding NaN and ±Inf (one per row, in
// both row modes) through the norms: the results must be the CPU's (NaN
// where it has NaN); 16-bit rows (1e30 is +Inf in float16) must be the
// float32 kernels' results on the widened rows and the CPU's (check16).
func TestOpsNormSpecialValues(t *testing.T) {
	e := newOpsEnv(t)
	specials := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e30}
	for _, c := range []int{7, 700} {
		const n = 4
		gen := func(i int) float64 {
			if i%c == 3 {
				return specials[(i/c)%len(specials)]
			}
			return e.rng.NormFloat64()
		}
		x := e.newPair(backend.Float32, contig(n, c), gen)
		y := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 7 })
		y2 := e.newPair(backend.Float32, contig(n, c), func(int) float64 { return 7 })
		mu := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
		rs := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
		rs2 := e.newPair(backend.Float32, contig(n), func(int) float64 { return 7 })
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.LayerNorm(v(y), v(mu), v(rs), v(x), backend.View{}, backend.View{}, 1e-5)
			be.RMSNorm(v(y2), v(rs2), v(x), backend.View{}, 1e-5)
		})
		e.compare(fmt.Sprintf("layer_norm specials C=%d y", c), y, opsTol)
		e.compare(fmt.Sprintf("layer_norm specials C=%d rstd", c), rs, opsTol)
		e.compare(fmt.Sprintf("rms_norm specials C=%d y", c), y2, opsTol)
		e.compare(fmt.Sprintf("rms_norm specials C=%d rstd", c), rs2, opsTol)
		for _, dt := range halfTypes {
			what := fmt.Sprintf("%v specials C=%d", dt, c)
			x, xf := e.nhIn(dt, contig(n, c), gen)
			y, yf := e.nhOut(dt, contig(n, c))
			mu, muf := e.nhOut(backend.Float32, contig(n))
			rs, rsf := e.nhOut(backend.Float32, contig(n))
			e.dev.LayerNorm(y.dev, mu.dev, rs.dev, x.dev, backend.View{}, backend.View{}, 1e-5)
			e.dev.LayerNorm(yf.dev, muf.dev, rsf.dev, xf.dev, backend.View{}, backend.View{}, 1e-5)
			e.ref.LayerNorm(yf.ref, muf.ref, rsf.ref, xf.ref, backend.View{}, backend.View{}, 1e-5)
			e.check16("layer_norm "+what+" y", y, yf, tolOps)
			e.check16("layer_norm "+what+" rstd", rs, rsf, tolOps)
			y, yf = e.nhOut(dt, contig(n, c))
			rs, rsf = e.nhOut(backend.Float32, contig(n))
			e.dev.RMSNorm(y.dev, rs.dev, x.dev, backend.View{}, 1e-5)
			e.dev.RMSNorm(yf.dev, rsf.dev, xf.dev, backend.View{}, 1e-5)
			e.ref.RMSNorm(yf.ref, rsf.ref, xf.ref, backend.View{}, 1e-5)
			e.check16("rms_norm "+what+" y", y, yf, tolOps)
			e.check16("rms_norm "+what+" rstd", rs, rsf, tolOps)
		}
	}
}

// nhShapes are (N, C): one row per simdgroup (C ≤ 512) with C below, at and
// past multiples of 32 and a partial last threadgroup of rows, and one row
// per threadgroup (C > 512) with C not a multiple of the threadgroup.
var nhShapes = [][2]int{{1, 1}, {13, 5}, {9, 33}, {70, 64}, {5, 512}, {4, 513}, {3, 1000}, {2, 4099}}

// nhIn is an input of dtype dt: t is the view the call under test reads
// (16-bit, or float32), f its values as float32 on both devices (t itself
// when dt is float32).
func (e *opsEnv) nhIn(dt backend.DType, s vspec, gen func(int) float64) (t, f pair) {
	if dt.IsHalf() {
		return e.newPair16(dt, s, gen)
	}
	p := e.newPair(backend.Float32, s, gen)
	return p, p
}

// nhOut is an output: t of dtype dt for the call under test, f float32 for
// the float32 twin (f.dev) and the CPU (f.ref), all filled with 7.
func (e *opsEnv) nhOut(dt backend.DType, s vspec) (t, f pair) {
	seven := func(int) float64 { return 7 }
	return e.newPair(dt, s, seven), e.newPair(backend.Float32, s, seven)
}

func nhDev(p pair) backend.View { return p.dev }

func nhRef(p pair) backend.View { return p.ref }

// nhDTypes are the (x, y, w) dtypes of the cases for 16-bit dtype dt: each
// float32 or dt (dy has y's dtype, dx x's, b, dw and db w's).
func nhDTypes(dt backend.DType) [][3]backend.DType {
	var out [][3]backend.DType
	for k := 0; k < 8; k++ {
		pick := func(bit int) backend.DType {
			if k&(1<<bit) != 0 {
				return dt
			}
			return backend.Float32
		}
		out = append(out, [3]backend.DType{pick(0), pick(1), pick(2)})
	}
	return out
}

// nhWorst collects check16 results by label (nhKind).
type nhWorst map[string]halfWorst

func (w nhWorst) add(label string, o halfWorst) {
	x := w[label]
	x.add(o)
	w[label] = x
}

func (w nhWorst) log(t *testing.T, title string) {
	t.Helper()
	var parts []string
	inexact := 0
	for _, k := range []string{"y", "rstd", "mean", "dx", "dw", "db"} {
		if v, ok := w[k+" float32"]; ok {
			parts = append(parts, fmt.Sprintf("%s float32 %.2g", k, v.ofBound))
			inexact += v.inexact
		}
		if v, ok := w[k+" 16-bit"]; ok {
			parts = append(parts, fmt.Sprintf("%s 16-bit %.3f (%.3f ulp16)", k, v.ofBound, v.ulps))
			inexact += v.inexact
		}
	}
	if inexact > 0 {
		parts = append(parts, fmt.Sprintf("%d elements not the float32 kernel's result", inexact))
	}
	t.Logf("%s: worst error / bound: %s", title, strings.Join(parts, ", "))
}

func nhKind(name string, dt backend.DType) string {
	if dt.IsHalf() {
		return name + " 16-bit"
	}
	return name + " float32"
}

func TestNormHalfRMSNorm(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		worst := nhWorst{}
		for _, sh := range nhShapes {
			n, c := sh[0], sh[1]
			for _, dts := range nhDTypes(dt) {
				xdt, ydt, wdt := dts[0], dts[1], dts[2]
				for _, withW := range []bool{true, false} {
					if !withW && wdt.IsHalf() {
						continue // the same case as with wdt float32
					}
					what := fmt.Sprintf("rms_norm %v %dx%d x %v y %v w %v (%v)", dt, n, c, xdt, ydt, wdt, withW)
					x, xf := e.nhIn(xdt, contig(n, c), func(int) float64 { return 2 * e.rng.NormFloat64() })
					var w, wf pair
					if withW {
						w, wf = e.nhIn(wdt, contig(c), e.uniform(0.5, 1.5))
					}
					y, yf := e.nhOut(ydt, contig(n, c))
					rs, rsf := e.nhOut(backend.Float32, contig(n))
					e.dev.RMSNorm(y.dev, rs.dev, x.dev, optView(w, nhDev), 1e-6)
					e.dev.RMSNorm(yf.dev, rsf.dev, xf.dev, optView(wf, nhDev), 1e-6)
					e.ref.RMSNorm(yf.ref, rsf.ref, xf.ref, optView(wf, nhRef), 1e-6)
					worst.add(nhKind("y", ydt), e.check16(what+" y", y, yf, tolOps))
					worst.add("rstd float32", e.check16(what+" rstd", rs, rsf, tolOps))

					// Backward from the CPU's rstd, dy of y's dtype, dx of x's,
					// dw of w's (without w: 16-bit if x is).
					rstd := e.nfHostCopy(rsf)
					dy, dyf := e.nhIn(ydt, contig(n, c), e.normal)
					dwdt := wdt
					if !withW {
						dwdt = xdt
					}
					for _, withDX := range []bool{true, false} {
						dx, dxf := e.nhOut(xdt, contig(n, c))
						dw, dwf := e.nhOut(dwdt, contig(c))
						if !withDX {
							dx, dxf = pair{}, pair{}
						}
						e.dev.RMSNormBackward(optView(dx, nhDev), dw.dev, dy.dev, x.dev, optView(w, nhDev), rstd.dev)
						e.dev.RMSNormBackward(optView(dxf, nhDev), dwf.dev, dyf.dev, xf.dev, optView(wf, nhDev), rstd.dev)
						e.ref.RMSNormBackward(optView(dxf, nhRef), dwf.ref, dyf.ref, xf.ref, optView(wf, nhRef), rstd.ref)
						bw := fmt.Sprintf("%s backward dx=%v dw %v", what, withDX, dwdt)
						if withDX {
							worst.add(nhKind("dx", xdt), e.check16(bw+" dx", dx, dxf, tolOps))
						}
						worst.add(nhKind("dw", dwdt), e.check16(bw+" dw", dw, dwf, tolOps))
					}
				}
			}
		}
		worst.log(t, fmt.Sprintf("rms_norm %v", dt))
	}
}

func TestNormHalfLayerNorm(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		worst := nhWorst{}
		for si, sh := range nhShapes {
			n, c := sh[0], sh[1]
			for ci, dts := range nhDTypes(dt) {
				xdt, ydt, wdt := dts[0], dts[1], dts[2]
				for mode := 0; mode < 4; mode++ { // bit 0: w, bit 1: b
					withW, withB := mode&1 != 0, mode&2 != 0
					if mode == 0 && wdt.IsHalf() {
						continue // the same case as with wdt float32
					}
					shift := 0.0
					if (si+ci+mode)%3 == 0 {
						shift = 100 // a mean far from zero against a spread of 1
					}
					what := fmt.Sprintf("layer_norm %v %dx%d x %v y %v w/b %v (%v/%v) shift %v", dt, n, c, xdt, ydt, wdt, withW, withB, shift)
					x, xf := e.nhIn(xdt, contig(n, c), func(int) float64 { return shift + e.rng.NormFloat64() })
					var w, wf, b, bf pair
					if withW {
						w, wf = e.nhIn(wdt, contig(c), e.uniform(0.5, 1.5))
					}
					if withB {
						b, bf = e.nhIn(wdt, contig(c), e.normal)
					}
					y, yf := e.nhOut(ydt, contig(n, c))
					mu, muf := e.nhOut(backend.Float32, contig(n))
					rs, rsf := e.nhOut(backend.Float32, contig(n))
					e.dev.LayerNorm(y.dev, mu.dev, rs.dev, x.dev, optView(w, nhDev), optView(b, nhDev), 1e-5)
					e.dev.LayerNorm(yf.dev, muf.dev, rsf.dev, xf.dev, optView(wf, nhDev), optView(bf, nhDev), 1e-5)
					e.ref.LayerNorm(yf.ref, muf.ref, rsf.ref, xf.ref, optView(wf, nhRef), optView(bf, nhRef), 1e-5)
					worst.add(nhKind("y", ydt), e.check16(what+" y", y, yf, tolOps))
					worst.add("mean float32", e.check16(what+" mean", mu, muf, tolOps))
					worst.add("rstd float32", e.check16(what+" rstd", rs, rsf, tolOps))

					mean, rstd := e.nfHostCopy(muf), e.nfHostCopy(rsf)
					dy, dyf := e.nhIn(ydt, contig(n, c), e.normal)
					gdt := wdt
					if !withW {
						gdt = xdt
					}
					for grads := 1; grads < 8; grads++ { // bit 0: dx, bit 1: dw, bit 2: db
						if mode != 3 && grads != 7 && grads != 1 {
							continue // every subset once per shape, with w and b
						}
						var dx, dxf, dw, dwf, db, dbf pair
						if grads&1 != 0 {
							dx, dxf = e.nhOut(xdt, contig(n, c))
						}
						if grads&2 != 0 {
							dw, dwf = e.nhOut(gdt, contig(c))
						}
						if grads&4 != 0 {
							db, dbf = e.nhOut(gdt, contig(c))
						}
						e.dev.LayerNormBackward(optView(dx, nhDev), optView(dw, nhDev), optView(db, nhDev), dy.dev, x.dev, optView(w, nhDev), mean.dev, rstd.dev)
						e.dev.LayerNormBackward(optView(dxf, nhDev), optView(dwf, nhDev), optView(dbf, nhDev), dyf.dev, xf.dev, optView(wf, nhDev), mean.dev, rstd.dev)
						e.ref.LayerNormBackward(optView(dxf, nhRef), optView(dwf, nhRef), optView(dbf, nhRef), dyf.ref, xf.ref, optView(wf, nhRef), mean.ref, rstd.ref)
						bw := fmt.Sprintf("%s backward grads %03b (dw/db %v)", what, grads, gdt)
						if dx.dev.Buf != nil {
							worst.add(nhKind("dx", xdt), e.check16(bw+" dx", dx, dxf, tolOps))
						}
						if dw.dev.Buf != nil {
							worst.add(nhKind("dw", gdt), e.check16(bw+" dw", dw, dwf, tolOps))
						}
						if db.dev.Buf != nil {
							worst.add(nhKind("db", gdt), e.check16(bw+" db", db, dbf, tolOps))
						}
					}
				}
			}
		}
		worst.log(t, fmt.Sprintf("layer_norm %v", dt))
	}
}

// TestNormHalfLargeRows: bfloat16 x whose squares overflow float32 (the
// rescaled pass of both forward kernels), into bfloat16 and float32 y.
func TestNormHalfLargeRows(t *testing.T) {
	e := newOpsEnv(t)
	dt := backend.BFloat16
	worst := nhWorst{}
	for _, sh := range [][2]int{{6, 40}, {2, 1500}} {
		n, c := sh[0], sh[1]
		for _, ydt := range []backend.DType{dt, backend.Float32} {
			what := fmt.Sprintf("%v x of 1e20 %dx%d y %v", dt, n, c, ydt)
			x, xf := e.nhIn(dt, contig(n, c), func(int) float64 { return 1e20 * (3 + e.rng.NormFloat64()) })
			w, wf := e.nhIn(dt, contig(c), e.uniform(0.5, 1.5))
			y, yf := e.nhOut(ydt, contig(n, c))
			rs, rsf := e.nhOut(backend.Float32, contig(n))
			e.dev.RMSNorm(y.dev, rs.dev, x.dev, w.dev, 1e-6)
			e.dev.RMSNorm(yf.dev, rsf.dev, xf.dev, wf.dev, 1e-6)
			e.ref.RMSNorm(yf.ref, rsf.ref, xf.ref, wf.ref, 1e-6)
			worst.add(nhKind("y", ydt), e.check16("rms_norm "+what+" y", y, yf, tolOps))
			worst.add("rstd float32", e.check16("rms_norm "+what+" rstd", rs, rsf, tolOps))

			y, yf = e.nhOut(ydt, contig(n, c))
			mu, muf := e.nhOut(backend.Float32, contig(n))
			rs, rsf = e.nhOut(backend.Float32, contig(n))
			e.dev.LayerNorm(y.dev, mu.dev, rs.dev, x.dev, w.dev, backend.View{}, 1e-5)
			e.dev.LayerNorm(yf.dev, muf.dev, rsf.dev, xf.dev, wf.dev, backend.View{}, 1e-5)
			e.ref.LayerNorm(yf.ref, muf.ref, rsf.ref, xf.ref, wf.ref, backend.View{}, 1e-5)
			worst.add(nhKind("y", ydt), e.check16("layer_norm "+what+" y", y, yf, tolOps))
			worst.add("mean float32", e.check16("layer_norm "+what+" mean", mu, muf, tolOps))
			worst.add("rstd float32", e.check16("layer_norm "+what+" rstd", rs, rsf, tolOps))
		}
	}
	worst.log(t, "bfloat16 x of 1e20")
}

// TestNormHalfParamGradBlocks: the weight and bias gradients over many row
// blocks (a short last one) and over no rows (zeros), from 16-bit dy and
// x, into 16-bit and float32 dw and db, without dx.
func TestNormHalfParamGradBlocks(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		worst := nhWorst{}
		for _, sh := range [][2]int{{3001, 8}, {1030, 70}, {0, 9}} {
			n, c := sh[0], sh[1]
			for _, io := range [][2]backend.DType{{dt, dt}, {backend.Float32, dt}, {dt, backend.Float32}} {
				xdt, ydt := io[0], io[1]
				x, xf := e.nhIn(xdt, contig(n, c), e.normal)
				dy, dyf := e.nhIn(ydt, contig(n, c), e.normal)
				mu := e.newPair(backend.Float32, contig(n), e.normal)
				rs := e.newPair(backend.Float32, contig(n), e.uniform(0.5, 2))
				for _, gdt := range []backend.DType{dt, backend.Float32} {
					what := fmt.Sprintf("%v %dx%d x %v dy %v grads %v", dt, n, c, xdt, ydt, gdt)
					dw, dwf := e.nhOut(gdt, contig(c))
					db, dbf := e.nhOut(gdt, contig(c))
					dw2, dw2f := e.nhOut(gdt, contig(c))
					e.dev.LayerNormBackward(backend.View{}, dw.dev, db.dev, dy.dev, x.dev, backend.View{}, mu.dev, rs.dev)
					e.dev.LayerNormBackward(backend.View{}, dwf.dev, dbf.dev, dyf.dev, xf.dev, backend.View{}, mu.dev, rs.dev)
					e.ref.LayerNormBackward(backend.View{}, dwf.ref, dbf.ref, dyf.ref, xf.ref, backend.View{}, mu.ref, rs.ref)
					e.dev.RMSNormBackward(backend.View{}, dw2.dev, dy.dev, x.dev, backend.View{}, rs.dev)
					e.dev.RMSNormBackward(backend.View{}, dw2f.dev, dyf.dev, xf.dev, backend.View{}, rs.dev)
					e.ref.RMSNormBackward(backend.View{}, dw2f.ref, dyf.ref, xf.ref, backend.View{}, rs.ref)
					worst.add(nhKind("dw", gdt), e.check16("layer_norm dw "+what, dw, dwf, tolOps))
					worst.add(nhKind("db", gdt), e.check16("layer_norm db "+what, db, dbf, tolOps))
					worst.add(nhKind("dw", gdt), e.check16("rms_norm dw "+what, dw2, dw2f, tolOps))
				}
			}
		}
		worst.log(t, fmt.Sprintf("param grads %v", dt))
	}
}

// TestOpsNormSchedules runs the norm kernels under the emulator's
// forward, reverse and random schedules: float32 (both row modes, the
// param grads), and every 16-bit form (both row modes, the param grads
// over several row blocks, 16-bit and float32 column sums). The results
// must agree bit for bit.
func TestOpsNormSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(5, 6))
	in := make([]float32, 3*sumSqBlock/2)
	for i := range in {
		in[i] = float32(gen.NormFloat64())
	}
	gen = rand.New(rand.NewPCG(9, 10))
	const n = 24*1000 + 64
	host := make([]float32, n)
	for i := range host {
		host[i] = float32(gen.NormFloat64())
	}
	var labels []string
	run := func() [][]uint32 {
		var outs [][]uint32
		labels = labels[:0]
		dev := e.dev
		v := contigView
		read := func(label string, b backend.Buffer, k int) {
			outs = append(outs, readBits(dev, b, k))
			labels = append(labels, label)
		}
		// float32.
		x := dev.Alloc(backend.Float32, len(in))
		dev.Write(x, in)
		for _, sh := range [][2]int{{24, 1000}, {300, 40}} {
			r, c := sh[0], sh[1]
			tag := fmt.Sprintf("float32 %dx%d", r, c)
			y, mu, rs, dx, dw, db := dev.Alloc(backend.Float32, r*c), dev.Alloc(backend.Float32, r), dev.Alloc(backend.Float32, r),
				dev.Alloc(backend.Float32, r*c), dev.Alloc(backend.Float32, c), dev.Alloc(backend.Float32, c)
			w := v(x, 7, c)
			dev.LayerNorm(v(y, 0, r, c), v(mu, 0, r), v(rs, 0, r), v(x, 0, r, c), w, v(x, 3, c), 1e-5)
			dev.LayerNormBackward(v(dx, 0, r, c), v(dw, 0, c), v(db, 0, c), v(x, 11, r, c), v(x, 0, r, c), w, v(mu, 0, r), v(rs, 0, r))
			read("layer_norm y "+tag, y, r*c)
			read("layer_norm mean "+tag, mu, r)
			read("layer_norm rstd "+tag, rs, r)
			read("layer_norm dx "+tag, dx, r*c)
			read("layer_norm dw "+tag, dw, c)
			read("layer_norm db "+tag, db, c)
			dev.RMSNorm(v(y, 0, r, c), v(rs, 0, r), v(x, 0, r, c), w, 1e-6)
			dev.RMSNormBackward(v(dx, 0, r, c), v(dw, 0, c), v(x, 11, r, c), v(x, 0, r, c), w, v(rs, 0, r))
			read("rms_norm y "+tag, y, r*c)
			read("rms_norm rstd "+tag, rs, r)
			read("rms_norm dx "+tag, dx, r*c)
			read("rms_norm dw "+tag, dw, c)
		}
		// 16-bit.
		up := func(dt backend.DType) backend.Buffer {
			b := dev.Alloc(dt, n)
			if dt == backend.Float32 {
				dev.Write(b, host)
				return b
			}
			dev.Write(b, narrowAll(dt, host))
			return b
		}
		for _, dt := range halfTypes {
			// (x, y/dy, w/b/dw/db): the intended float32 residual into 16-bit
			// y, all 16-bit, 16-bit x into float32 y.
			for _, dts := range [][3]backend.DType{{backend.Float32, dt, backend.Float32}, {dt, dt, dt}, {dt, backend.Float32, dt}} {
				xb, yb, wb := up(dts[0]), up(dts[1]), up(dts[2])
				for _, sh := range [][2]int{{24, 1000}, {300, 40}} {
					r, c := sh[0], sh[1]
					tag := fmt.Sprintf("%v x %v y %v w %v %dx%d", dt, dts[0], dts[1], dts[2], r, c)
					y, dx := dev.Alloc(dts[1], r*c), dev.Alloc(dts[0], r*c)
					dw, db := dev.Alloc(dts[2], c), dev.Alloc(dts[2], c)
					mu, rs := dev.Alloc(backend.Float32, r), dev.Alloc(backend.Float32, r)
					w, bias := v(wb, 7, c), v(wb, 3, c)
					dev.LayerNorm(v(y, 0, r, c), v(mu, 0, r), v(rs, 0, r), v(xb, 0, r, c), w, bias, 1e-5)
					dev.LayerNormBackward(v(dx, 0, r, c), v(dw, 0, c), v(db, 0, c), v(yb, 11, r, c), v(xb, 0, r, c), w, v(mu, 0, r), v(rs, 0, r))
					read("layer_norm y "+tag, y, r*c)
					read("layer_norm mean "+tag, mu, r)
					read("layer_norm rstd "+tag, rs, r)
					read("layer_norm dx "+tag, dx, r*c)
					read("layer_norm dw "+tag, dw, c)
					read("layer_norm db "+tag, db, c)
					dev.RMSNorm(v(y, 0, r, c), v(rs, 0, r), v(xb, 0, r, c), w, 1e-6)
					dev.RMSNormBackward(v(dx, 0, r, c), v(dw, 0, c), v(yb, 11, r, c), v(xb, 0, r, c), w, v(rs, 0, r))
					read("rms_norm y "+tag, y, r*c)
					read("rms_norm rstd "+tag, rs, r)
					read("rms_norm dx "+tag, dx, r*c)
					read("rms_norm dw "+tag, dw, c)
				}
			}
		}
		return outs
	}
	schedulesAgree(t, drv, run, func(i int) string { return labels[i] })
}

// TestOpsNormRefused: float64 is refused with the backend's message
// (before any kernel), and the dtype combinations outside the contract
// panic naming the kernel and the dtypes.
func TestOpsNormRefused(t *testing.T) {
	refusesFloat64(t, func(b *Backend, f64 backend.View) map[string]func() {
		return map[string]func(){
			kRMSNorm:       func() { b.RMSNorm(f64, f64, f64, f64, 1e-5) },
			kRMSNormBack:   func() { b.RMSNormBackward(f64, f64, f64, f64, f64, f64) },
			kLayerNorm:     func() { b.LayerNorm(f64, f64, f64, f64, f64, f64, 1e-5) },
			kLayerNormBack: func() { b.LayerNormBackward(f64, f64, f64, f64, f64, f64, f64, f64) },
		}
	})
	e := newOpsEnv(t)
	f16 := e.newPair(backend.Float16, contig(2, 4), e.normal)
	bf16 := e.newPair(backend.BFloat16, contig(2, 4), e.normal)
	w16 := e.newPair(backend.Float16, contig(4), e.normal)
	wbf := e.newPair(backend.BFloat16, contig(4), e.normal)
	f32 := e.newPair(backend.Float32, contig(2, 4), e.normal)
	w32 := e.newPair(backend.Float32, contig(4), e.normal)
	s32 := e.newPair(backend.Float32, contig(2), e.normal)
	s16 := e.newPair(backend.Float16, contig(2), e.normal)
	i32 := e.newPair(backend.Int32, contig(2, 4), func(int) float64 { return 1 })
	x, y, w, b, s, s2 := f16.dev, bf16.dev, w32.dev, wbf.dev, s32.dev, s16.dev
	none := backend.View{}
	for _, c := range []struct {
		name, kernel string
		fn           func()
		words        []string // in the message
	}{
		{"rms_norm f16 x into bf16 y", kRMSNorm, func() { e.dev.RMSNorm(y, s, x, w, 1e-6) }, []string{"y bfloat16", "x float16", "at most one 16-bit dtype"}},
		{"rms_norm f16 x, bf16 w", kRMSNorm, func() { e.dev.RMSNorm(f32.dev, s, x, b, 1e-6) }, []string{"x float16", "w bfloat16"}},
		{"rms_norm f16 rstd", kRMSNorm, func() { e.dev.RMSNorm(x, s2, x, w, 1e-6) }, []string{"rstd must be float32", "rstd float16"}},
		{"rms_norm int32 x", kRMSNorm, func() { e.dev.RMSNorm(f32.dev, s, i32.dev, w, 1e-6) }, []string{"x must be float32, float16 or bfloat16", "x int32"}},
		{"layer_norm w f32, b f16", kLayerNorm, func() { e.dev.LayerNorm(x, s, s, x, w, w16.dev, 1e-5) }, []string{"b must have w's dtype", "w float32", "b float16"}},
		{"layer_norm bf16 y, f16 b", kLayerNorm, func() { e.dev.LayerNorm(y, s, s, f32.dev, none, w16.dev, 1e-5) }, []string{"y bfloat16", "b float16"}},
		{"layer_norm f16 mean", kLayerNorm, func() { e.dev.LayerNorm(x, s2, s, x, w, none, 1e-5) }, []string{"mean must be float32", "mean float16"}},
		{"rms_norm_backward dx f32, x f16", kRMSNormBack, func() { e.dev.RMSNormBackward(f32.dev, none, x, x, w, s) }, []string{"dx must have x's dtype", "dx float32", "x float16"}},
		{"rms_norm_backward dw f16, w f32", kRMSNormBack, func() { e.dev.RMSNormBackward(x, w16.dev, x, x, w, s) }, []string{"dw must have w's dtype"}},
		{"rms_norm_backward bf16 dy, f16 x", kRMSNormBack, func() { e.dev.RMSNormBackward(x, none, y, x, w, s) }, []string{"dy bfloat16", "x float16"}},
		{"layer_norm_backward db f16, dw f32", kLayerNormBack, func() { e.dev.LayerNormBackward(x, w, w16.dev, x, x, none, s, s) }, []string{"db must have dw's dtype"}},
		{"layer_norm_backward f16 rstd", kLayerNormBack, func() { e.dev.LayerNormBackward(x, none, none, x, x, w, s, s2) }, []string{"rstd must be float32", "rstd float16"}},
		{"layer_norm_backward bf16 dw, f16 x", kLayerNormBack, func() { e.dev.LayerNormBackward(x, wbf.dev, none, x, x, none, s, s) }, []string{"dw bfloat16", "x float16"}},
	} {
		wantPanic(t, c.name, c.fn, "metal: "+c.kernel+": ", c.words...)
	}
}

// TestOpsNormKernelNames: every name of the norm kernels' tables is
// defined in the sources and ends in its dtype's tag.
func TestOpsNormKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{kRMSNorm, kRMSNormBack, kLayerNorm, kLayerNormBack} {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
	for _, names := range []byDType{kRMSNormBy, kRMSNormBackBy, kLayerNormBy, kLayerNormBackBy, kNormParamGradBy, kNormColSumBy} {
		for _, dt := range floatTypes {
			name := names[dt]
			if _, ok := idx[name]; !ok {
				t.Errorf("kernel %s is not defined in kernels/*.metal", name)
			}
			if want := dtypeTag(dt); !strings.HasSuffix(name, "_"+want) {
				t.Errorf("kernel %s for %v does not end in _%s", name, dt, want)
			}
		}
	}
}

// Emulator timings of the norm kernels (go test -bench OpsNorm -run '^$'
// ./metal); they measure the emulation, not a GPU.
func BenchmarkOpsNorm(b *testing.B) {
	dev := opsBenchDevice(b)
	up := func(shape ...int) backend.View { return benchView(dev, 0.1, shape...) }
	bench := func(name string, fn func()) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				fn()
				dev.Sync()
			}
		})
	}
	for _, c := range []int{64, 1024} {
		const rows = 64
		x, y, dx, dy := up(rows, c), up(rows, c), up(rows, c), up(rows, c)
		w, bb, dw, db := up(c), up(c), up(c), up(c)
		mu, rs := up(rows), up(rows)
		bench(fmt.Sprintf("rms_norm_%dx%d", rows, c), func() { dev.RMSNorm(y, rs, x, w, 1e-6) })
		bench(fmt.Sprintf("rms_norm_backward_%dx%d", rows, c), func() { dev.RMSNormBackward(dx, dw, dy, x, w, rs) })
		bench(fmt.Sprintf("layer_norm_%dx%d", rows, c), func() { dev.LayerNorm(y, mu, rs, x, w, bb, 1e-5) })
		bench(fmt.Sprintf("layer_norm_backward_%dx%d", rows, c), func() { dev.LayerNormBackward(dx, dw, db, dy, x, w, mu, rs) })
	}
}
