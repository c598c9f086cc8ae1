package notebook

import (
	"fmt"
	"os"

	"github.com/forgeml/forge/forge/train"
)

// Open opens the run directory dir for the cell: it resumes the run there
// (model, optimizer, data position and history from the latest
// checkpoint), or creates it with cfg (default: train.DefaultConfig) on
// the built-in corpus. For an existing run cfg may change the schedule,
// eval and save cadence but not the model or batch shape. Progress while
// creating a run (tokenizer training, encoding) is printed.
//
// dir may also be a .forge model repository (forge export --format
// forge): the run is then dir + ".run" beside it, started from the
// repository's weights, tokenizer and config, and s.Commit(message)
// saves a new revision back to the repository.
//
// The run is on the device Device named, else on the default choice,
// whose notice is printed when it was made for the user (Metal on a Mac,
// or why the CPU there). Every GoNB cell is a new process, so put this at
// the top of each cell that trains or inspects the run:
//
//	s, err := notebook.Open("runs/tiny", cfg)
//	if err != nil { panic(err) }
//	defer s.Close()
//	notebook.Train(s, 200)
func Open(dir string, cfg ...train.Config) (*train.Session, error) {
	sayDevice(os.Stdout) // Metal picked on a Mac, or why not (Device chooses)
	return open(dir, train.OpenOptions{Log: os.Stdout}, cfg...)
}

func open(dir string, o train.OpenOptions, cfg ...train.Config) (*train.Session, error) {
	switch len(cfg) {
	case 0:
	case 1:
		c := cfg[0]
		o.Config = &c
	default:
		return nil, fmt.Errorf("notebook: Open takes at most one config, got %d", len(cfg))
	}
	return train.Open(dir, o)
}
