package train

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/forgeml/forge/forge/data"
	"github.com/forgeml/forge/forge/tokenizer"
)

// Problem is one thing Check found wrong with a run directory: what it
// is, and what forge does about it (or what the user must do).
type Problem struct {
	What   string
	Action string
}

func (p Problem) String() string { return p.What + ": " + p.Action }

// CheckReport is what Check found.
type CheckReport struct {
	Dir         string
	Step        int      // of the checkpoint a resume would load (-1: none loads)
	Checkpoints []string // complete checkpoint directories, oldest first
	Holder      string   // who holds the lock ("" if nobody)
	Problems    []Problem
}

// Summary is one line: the run's state and the number of problems.
func (r CheckReport) Summary() string {
	var b strings.Builder
	if r.Step >= 0 {
		fmt.Fprintf(&b, "%s: step %d, %d checkpoint(s)", r.Dir, r.Step, len(r.Checkpoints))
	} else {
		fmt.Fprintf(&b, "%s: no checkpoint loads", r.Dir)
	}
	if r.Holder != "" {
		fmt.Fprintf(&b, ", open for writing by %s", r.Holder)
	}
	switch n := len(r.Problems); n {
	case 0:
		b.WriteString(", no problems")
	case 1:
		b.WriteString(", 1 problem")
	default:
		fmt.Fprintf(&b, ", %d problems", n)
	}
	return b.String()
}

// Check verifies a run directory without changing it (it writes nothing;
// it takes the lock for an instant to see whether a writer holds it): the config and tokenizer, every checkpoint's
// state and checksums, that `latest` names one that loads, the token
// files against the checkpoint's record and the tokenizer's vocabulary,
// the metrics log against the checkpoint, the lock, and the leftovers of
// interrupted writes. It returns an error only when dir is not a run.
func Check(dir string) (CheckReport, error) {
	r := CheckReport{Dir: dir, Step: -1}
	add := func(action, format string, a ...any) {
		r.Problems = append(r.Problems, Problem{What: fmt.Sprintf(format, a...), Action: action})
	}
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if errors.Is(err, os.ErrNotExist) {
		return r, fmt.Errorf("train: %s is not a run directory (no %s)", dir, ConfigFile)
	}
	if err != nil {
		return r, fmt.Errorf("train: %v", err)
	}
	if _, err := ParseConfig(b); err != nil {
		add("forge cannot open the run; fix or restore the file", "%s: %v", filepath.Join(dir, ConfigFile), err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, TokenizerFile))
	if err != nil {
		add("forge cannot open the run; restore the file", "%v", err)
	}

	// Checkpoints, in the order a resume tries them.
	root := filepath.Join(dir, CheckpointDir)
	r.Checkpoints = checkpointNames(root)
	var loaded *State
	tries := candidates(dir)
	for i, name := range tries {
		cdir := filepath.Join(root, name)
		st, err := readState(cdir)
		if err == nil {
			err = verifyFiles(cdir, &st)
		}
		if err != nil {
			action := "an older checkpoint is used instead; remove this one to silence the warning"
			if i == 0 && name != "" {
				if _, serr := os.Stat(cdir); serr != nil {
					err = fmt.Errorf("%s names %s, which does not exist", LatestFile, name)
				}
			}
			add(action, "checkpoint %s: %v", name, err)
			continue
		}
		if loaded == nil {
			loaded = &st
			r.Step = st.Step
		}
	}
	if len(tries) == 0 {
		add("there is nothing to resume; delete the directory to start again", "no checkpoint in %s", root)
	} else if loaded == nil {
		add("forge cannot resume the run; restore a checkpoint from a backup or delete the directory", "no checkpoint in %s loads", root)
	}

	// Token files: the record of the checkpoint, the vocabulary.
	for _, f := range tokenFiles(dir) {
		path := filepath.Join(dir, DataDir, f)
		toks, err := data.ReadTokens(path)
		if err != nil {
			add("forge cannot train on the run; restore the file", "%v", err)
			continue
		}
		if tok != nil {
			for i, id := range toks {
				if int(id) >= tok.VocabSize() {
					add("training would fail; restore the file", "%s: token %d at %d is outside the tokenizer's %d ids", path, id, i, tok.VocabSize())
					break
				}
			}
		}
		if loaded != nil {
			if want, ok := loaded.TokenFiles[f]; ok {
				size, sum, err := data.FileDigest(path)
				if err == nil && (size != want.Size || sum != want.SHA256) {
					add("forge refuses to open the run; restore the file or start a new run on the new data", "%s is not the token file the run was trained on (sha256 %.12s… recorded, %.12s… now)", path, want.SHA256, sum)
				}
			}
		}
	}

	// The metrics log against the checkpoint.
	if loaded != nil {
		path := filepath.Join(dir, MetricsFile)
		if _, err := readMetrics(path, loaded.History); err != nil {
			add("on the next open the log is set aside and the records that parse are kept", "%v", strings.TrimPrefix(err.Error(), "train: "))
		} else if metricsBeyond(path, loaded.History) {
			add("on the next open they are dropped: the resumed run redoes those steps", "%s holds records after the checkpoint's step %d (a run that stopped without saving)", path, loaded.Step)
		}
	}
	// The lock: who holds it, if anyone.
	r.Holder = lockHolderOf(dir)

	// Leftovers of interrupted writes.
	for _, p := range orphans(dir) {
		add("removed the next time the run is opened for writing", "%s (%s) is left from an interrupted write", p, humanBytes(int(treeSize(p))))
	}
	return r, nil
}
