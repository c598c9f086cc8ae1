package cli

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/forgeml/forge/forge/fmodel"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/internal/numfmt"
)

const modelArgs = "log|checkout|inspect|verify|to-safetensors R.forge [rev] [out/] [--rev rev] [--device d]"

const modelHelp = `forge model works on .forge model repositories (forge export --format forge):

  forge model log R [--rev rev]        the revisions, newest first
  forge model checkout R rev           make rev current (the next commit's parent)
  forge model inspect R [--rev rev]    tensors, dtypes, shapes, hashes, totals
  forge model verify R                 re-hash every shard, tensor and file
  forge model to-safetensors R out/ [--rev rev]
                                       write a Hugging Face / PyTorch model (like forge export)

A revision is HEAD, HEAD~N or a prefix of at least 4 digits of its hash.
generate, eval, info and export read a repository given to --run directly.`

func cmdModel(e *env, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(e.stdout, modelHelp)
		if len(args) == 0 {
			return usagef("forge model needs a subcommand: log, checkout, inspect, verify or to-safetensors")
		}
		return nil
	}
	sub, args := args[0], args[1:]
	fs := flags(e, "model "+sub)
	rev := fs.String("rev", "", "revision (HEAD, HEAD~N or a hash prefix; default HEAD)")
	device := deviceFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	need := func(n int, what string) error {
		if len(pos) != n {
			return usagef("forge model %s takes %s, got %d argument(s)", sub, what, len(pos))
		}
		return nil
	}
	switch sub {
	case "log":
		if err := need(1, "a repository"); err != nil {
			return err
		}
		return modelLog(e, pos[0], *rev)
	case "checkout":
		if len(pos) == 1 && *rev != "" {
			pos = append(pos, *rev)
		}
		if err := need(2, "a repository and a revision"); err != nil {
			return err
		}
		r, err := fmodel.Open(pos[0])
		if err != nil {
			return err
		}
		h, err := r.Checkout(pos[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s: HEAD is now %s\n", pos[0], fmodel.Short(h))
		return nil
	case "inspect":
		if err := need(1, "a repository"); err != nil {
			return err
		}
		return modelInspect(e, pos[0], *rev)
	case "verify":
		if err := need(1, "a repository"); err != nil {
			return err
		}
		return modelVerify(e, pos[0])
	case "to-safetensors":
		if err := need(2, "a repository and an output directory"); err != nil {
			return err
		}
		if err := e.useDevice(*device); err != nil {
			return err
		}
		snap, err := train.MapRepository(pos[0], *rev)
		if err != nil {
			return err
		}
		fam, err := train.Export(snap.Model, snap.Tokenizer, pos[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "wrote revision %s of %s to %s as a transformers %s model (see %s)\n", fmodel.Short(snap.Revision), pos[0], pos[1], fam, filepath.Join(pos[1], "README.md"))
		return nil
	}
	return usagef("forge model %s: no such subcommand; want log, checkout, inspect, verify or to-safetensors", sub)
}

func modelLog(e *env, dir, rev string) error {
	r, err := fmodel.Open(dir)
	if err != nil {
		return err
	}
	head, _ := r.Head()
	revs, err := r.Log(rev)
	for _, v := range revs {
		m := v.Manifest
		mark := " "
		if v.Hash == head {
			mark = "*"
		}
		step := ""
		if s := m.Meta["step"]; s != "" {
			step = "  step " + s
		}
		fmt.Fprintf(e.stdout, "%s %s  %s  %s  %d tensors%s  %s\n", mark, fmodel.Short(v.Hash), m.Time.Local().Format(time.DateTime),
			numfmt.Bytes(float64(m.Bytes())), len(m.Tensors), step, m.Message)
	}
	return err
}

func modelInspect(e *env, dir, rev string) error {
	r, err := fmodel.Open(dir)
	if err != nil {
		return err
	}
	h, err := r.Resolve(rev)
	if err != nil {
		return err
	}
	m, err := r.Manifest(h)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "revision %s (%s), %s: %s\n", fmodel.Short(h), m.Time.Local().Format(time.DateTime), parentOf(m), m.Message)
	var keys []string
	for k := range m.Meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(e.stdout, "  %s: %s\n", k, m.Meta[k])
	}
	width := 4
	for _, t := range m.Tensors {
		width = max(width, len(t.Name))
	}
	fmt.Fprintf(e.stdout, "%-*s  %-5s  %-14s  %10s  %-12s  %s\n", width, "name", "dtype", "shape", "bytes", "sha256", "shards")
	dtypes := map[string]int64{}
	shards := map[string]bool{}
	var elems int64
	for _, t := range m.Tensors {
		var where []string
		for _, p := range t.Parts {
			where = append(where, fmodel.Short(p.Shard)[:8])
			shards[p.Shard] = true
		}
		n := int64(1)
		for _, d := range t.Shape {
			n *= int64(d)
		}
		elems += n
		dtypes[string(t.DType)] += t.Size
		fmt.Fprintf(e.stdout, "%-*s  %-5s  %-14s  %10s  %-12s  %s\n", width, t.Name, t.DType, fmt.Sprint(t.Shape), numfmt.Thousands(int(t.Size)), fmodel.Short(t.SHA256), strings.Join(where, ","))
	}
	var dts []string
	for d, b := range dtypes {
		dts = append(dts, fmt.Sprintf("%s %s", d, numfmt.Bytes(float64(b))))
	}
	sort.Strings(dts)
	fmt.Fprintf(e.stdout, "%d tensors, %s values, %s (%s) in %d shard(s)", len(m.Tensors), numfmt.Thousands(int(elems)), numfmt.Bytes(float64(m.Bytes())), strings.Join(dts, ", "), len(shards))
	for _, f := range m.Files {
		fmt.Fprintf(e.stdout, "; file %s (%s)", f.Name, numfmt.Bytes(float64(f.Size)))
	}
	fmt.Fprintln(e.stdout)
	return nil
}

func parentOf(m *fmodel.Manifest) string {
	if m.Parent == "" {
		return "first revision"
	}
	return "parent " + fmodel.Short(m.Parent)
}

func modelVerify(e *env, dir string) error {
	r, err := fmodel.Open(dir)
	if err != nil {
		return err
	}
	start := time.Now()
	rep, err := r.Verify()
	if err != nil {
		return err
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(e.stdout, "problem: %s\n", p)
	}
	fmt.Fprintf(e.stdout, "%s: %d revision(s), %d shard(s), %d blob(s), %s hashed in %s\n", dir, rep.Revisions, rep.Shards, rep.Blobs,
		numfmt.Bytes(float64(rep.Bytes)), time.Since(start).Round(time.Millisecond))
	if len(rep.Problems) > 0 {
		return fmt.Errorf("%s: %d problem(s), listed above", dir, len(rep.Problems))
	}
	fmt.Fprintln(e.stdout, "ok")
	return nil
}

// exportForge commits a run's model to the repository out.
func exportForge(e *env, snap *train.Snapshot, runDir, out, dtype, message string) error {
	st, err := train.CommitModel(out, snap.Model, snap.Tokenizer, snap.Config, snap.Step,
		train.CommitOptions{DType: dtype, Message: message, Meta: map[string]string{"run": runDir}})
	if err != nil {
		return err
	}
	parent := "a new repository"
	if st.Parent != "" {
		parent = "parent " + fmodel.Short(st.Parent)
	}
	fmt.Fprintf(e.stdout, "committed step %d of %s to %s as revision %s (%s): %d tensors; wrote %d new blob(s), %s in %d shard(s); reused %d\n",
		snap.Step, runDir, out, fmodel.Short(st.Hash), parent, st.Tensors, st.Written, numfmt.Bytes(float64(st.BytesWritten)), st.Shards, st.Reused)
	return nil
}
