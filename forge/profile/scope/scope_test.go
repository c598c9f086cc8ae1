package scope

import (
	"slices"
	"testing"
	"time"
)

func TestDo(t *testing.T) {
	var inside []string
	Do("a", func() { inside = append(inside, Current()) })
	if !slices.Equal(inside, []string{""}) {
		t.Errorf("without an observer the label is %q", inside)
	}

	var ended []string
	prev := SetObserver(func(path string, start time.Time, d time.Duration) {
		if start.IsZero() || d < 0 {
			t.Errorf("%s: start %v, duration %v", path, start, d)
		}
		ended = append(ended, path)
	})
	defer SetObserver(prev)
	inside = nil
	Do("blocks", func() {
		Indexed("layer", 2, func() {
			inside = append(inside, Current())
			Do("attn", func() { inside = append(inside, Current()) })
		})
		inside = append(inside, Current())
	})
	if want := []string{"blocks/layer.2", "blocks/layer.2/attn", "blocks"}; !slices.Equal(inside, want) {
		t.Errorf("labels %q, want %q", inside, want)
	}
	if want := []string{"blocks/layer.2/attn", "blocks/layer.2", "blocks"}; !slices.Equal(ended, want) {
		t.Errorf("observed %q, want %q", ended, want)
	}
	if Current() != "" {
		t.Errorf("label after the scopes: %q", Current())
	}
	// A panic inside fn pops the scope too.
	func() {
		defer func() { recover() }()
		Do("boom", func() { panic("x") })
	}()
	if Current() != "" || ended[len(ended)-1] != "boom" {
		t.Errorf("after a panic: label %q, observed %q", Current(), ended)
	}
}
