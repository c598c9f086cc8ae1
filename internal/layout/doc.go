// Package layout holds tests of the source tree's shape rather than of
// its behaviour: how files group their imports (layout_test.go).
package layout
