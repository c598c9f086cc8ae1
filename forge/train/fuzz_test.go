package train

import (
	"encoding/json"
	"testing"

	"github.com/forgeml/forge/configs"
)

// FuzzParseConfig: any input is refused with an error or parsed into a
// valid config that survives a JSON round trip unchanged.
func FuzzParseConfig(f *testing.F) {
	for _, name := range configs.Names() {
		b, _ := configs.Get(name)
		f.Add(b)
	}
	f.Add([]byte(`{"model": {"n_head": 0}}`))
	f.Add([]byte(`{"batch": -1, "lr": 1e400}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted an invalid config: %v", err)
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseConfig(again)
		if err != nil || c2 != c {
			t.Fatalf("round trip changed the config: %v\n%+v\n%+v", err, c, c2)
		}
	})
}

// FuzzParseState: no input panics; accepted states round-trip.
func FuzzParseState(f *testing.F) {
	good, _ := json.Marshal(State{Format: stateFormat, Version: stateVersion, Step: 3, History: 3,
		Files: map[string]string{modelFile: "ab", optimFile: "cd"}})
	f.Add(good)
	f.Add([]byte(`{"format": "forge-run-state", "version": 1, "step": -1}`))
	f.Add([]byte(`{"loader": {"rng": ["zz"]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseState(b)
		if err != nil {
			return
		}
		again, _ := json.Marshal(st)
		if _, err := ParseState(again); err != nil {
			t.Fatalf("an accepted state does not re-parse: %v", err)
		}
	})
}
