package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/forgeml/forge/internal/atomicfile"
)

// Hub fetches Hugging Face datasets: their Parquet files, from a local
// Hugging Face cache when it holds them, else from the hub's dataset
// server (GET {Endpoint}/api/datasets/{repo}/parquet/{config}/{split}
// lists them), downloaded into Cache. Downloads resume where a dropped
// connection or a killed process left them (a .part file and an HTTP
// range request), and a file counts only once it is complete.
type Hub struct {
	Endpoint string       // https://huggingface.co, or $HF_ENDPOINT
	Token    string       // $HF_TOKEN, $HUGGING_FACE_HUB_TOKEN, or the token file of huggingface-cli login
	Cache    string       // downloads: <user cache>/forge/hf, or $FORGE_CACHE_DIR/hf
	HFCache  string       // a Hugging Face hub cache to read first: $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub
	Offline  bool         // $HF_HUB_OFFLINE=1: the local caches only
	Client   *http.Client // nil: http.DefaultClient
	Retries  int          // attempts after a dropped connection (0: 5)
	Log      io.Writer    // download progress (nil: none)
}

// DefaultHub is a Hub configured from the environment the way the
// Hugging Face tools are.
func DefaultHub() *Hub {
	h := &Hub{Endpoint: os.Getenv("HF_ENDPOINT"), Token: hubToken()}
	if h.Endpoint == "" {
		h.Endpoint = "https://huggingface.co"
	}
	home := os.Getenv("HF_HOME")
	if home == "" {
		if d, err := os.UserHomeDir(); err == nil {
			home = filepath.Join(d, ".cache", "huggingface")
		}
	}
	h.HFCache = os.Getenv("HF_HUB_CACHE")
	if h.HFCache == "" && home != "" {
		h.HFCache = filepath.Join(home, "hub")
	}
	if c := os.Getenv("FORGE_CACHE_DIR"); c != "" {
		h.Cache = filepath.Join(c, "hf")
	} else if d, err := os.UserCacheDir(); err == nil {
		h.Cache = filepath.Join(d, "forge", "hf")
	}
	h.Offline = os.Getenv("HF_HUB_OFFLINE") == "1"
	return h
}

// hubToken finds the user's token as huggingface_hub does.
func hubToken() string {
	for _, v := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := strings.TrimSpace(os.Getenv(v)); t != "" {
			return t
		}
	}
	var paths []string
	if p := os.Getenv("HF_TOKEN_PATH"); p != "" {
		paths = append(paths, p)
	}
	if h := os.Getenv("HF_HOME"); h != "" {
		paths = append(paths, filepath.Join(h, "token"))
	}
	if d, err := os.UserHomeDir(); err == nil {
		paths = append(paths, filepath.Join(d, ".cache", "huggingface", "token"))
	}
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != "" {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

func (s *Source) config() string {
	if s.Config == "" {
		return "default"
	}
	return s.Config
}

func (s *Source) split() string {
	if s.Split == "" {
		return "train"
	}
	return s.Split
}

// Files returns local paths of the source's Parquet files, downloading
// what no cache holds.
func (h *Hub) Files(ctx context.Context, s *Source) ([]string, error) {
	if files := h.cached(s); len(files) > 0 {
		return files, nil
	}
	if h.Offline {
		return nil, fmt.Errorf("dataset: %s: not in the Hugging Face cache %s and HF_HUB_OFFLINE=1 forbids downloading it", s.Name, h.HFCache)
	}
	urls, err := h.list(ctx, s)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(h.Cache, "datasets", filepath.FromSlash(s.Repo), s.config(), s.split())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("dataset: %s: %v", s.Name, err)
	}
	var files, names []string
	for i, u := range urls {
		path := filepath.Join(dir, fmt.Sprintf("%04d.parquet", i))
		if _, err := os.Stat(path); err != nil {
			if err := h.download(ctx, s, u, path); err != nil {
				return nil, err
			}
		}
		files, names = append(files, path), append(names, filepath.Base(path))
	}
	// The set counts as downloaded once every file of the list is:
	// complete.json, written last, is what later reads trust offline.
	b, _ := json.Marshal(names)
	if err := atomicfile.WriteBytes(filepath.Join(dir, "complete.json"), b); err != nil {
		return nil, fmt.Errorf("dataset: %s: %v", s.Name, err)
	}
	return files, nil
}

// cached finds the source's Parquet files in the Hugging Face cache
// (datasets--org--name/snapshots/<rev>/…) or among Forge's complete
// downloads.
func (h *Hub) cached(s *Source) []string {
	var out []string
	if h.HFCache != "" {
		snaps := filepath.Join(h.HFCache, "datasets--"+strings.ReplaceAll(s.Repo, "/", "--"), "snapshots")
		revs, _ := os.ReadDir(snaps)
		// The revision refs/main names, else the last in name order.
		pick := ""
		if b, err := os.ReadFile(filepath.Join(filepath.Dir(snaps), "refs", "main")); err == nil {
			pick = strings.TrimSpace(string(b))
		}
		if pick == "" && len(revs) > 0 {
			pick = revs[len(revs)-1].Name()
		}
		if pick != "" {
			var all []string
			root := filepath.Join(snaps, pick)
			filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && strings.HasSuffix(d.Name(), ".parquet") {
					rel, _ := filepath.Rel(root, p)
					all = append(all, filepath.ToSlash(rel))
				}
				return nil
			})
			for _, rel := range matchSplit(all, s.Config, s.split()) {
				out = append(out, filepath.Join(root, filepath.FromSlash(rel)))
			}
		}
	}
	if len(out) > 0 || h.Cache == "" {
		return out
	}
	dir := filepath.Join(h.Cache, "datasets", filepath.FromSlash(s.Repo), s.config(), s.split())
	if b, err := os.ReadFile(filepath.Join(dir, "complete.json")); err == nil {
		var names []string
		if json.Unmarshal(b, &names) == nil {
			for _, n := range names {
				out = append(out, filepath.Join(dir, filepath.Base(n)))
			}
		}
	}
	return out
}

// matchSplit keeps the paths of a config and split in the layouts the
// hub uses: config/split/0000.parquet, data/split-00000-of-00001.parquet,
// config/split-*.parquet.
func matchSplit(paths []string, config, split string) []string {
	var out []string
	for _, p := range paths {
		parts := strings.Split(p, "/")
		if config != "" && !contains(parts[:len(parts)-1], config) {
			continue
		}
		base := parts[len(parts)-1]
		if contains(parts[:len(parts)-1], split) || strings.HasPrefix(base, split+"-") || strings.HasPrefix(base, split+"_") || strings.HasPrefix(base, split+".") {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// httpError is an HTTP status as one line naming the source and what to do.
func httpError(s *Source, what string, resp *http.Response) error {
	code := resp.StatusCode
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("dataset: %s: the hub refused %s (%d %s): the dataset is gated or private; accept its terms on the hub and set HF_TOKEN (or run huggingface-cli login)",
			s.Name, what, code, http.StatusText(code))
	case http.StatusNotFound:
		return fmt.Errorf("dataset: %s: the hub has no config %q, split %q of %s (404); check the names on the dataset's page", s.Name, s.config(), s.split(), s.Repo)
	}
	return fmt.Errorf("dataset: %s: the hub answered %d %s for %s", s.Name, code, http.StatusText(code), what)
}

func (h *Hub) client() *http.Client {
	if h.Client != nil {
		return h.Client
	}
	return http.DefaultClient
}

func (h *Hub) request(ctx context.Context, url string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if h.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.Token)
	}
	req.Header.Set("User-Agent", "forge-dataset")
	return req, nil
}

// list asks the hub for the URLs of the source's Parquet files.
func (h *Hub) list(ctx context.Context, s *Source) ([]string, error) {
	url := fmt.Sprintf("%s/api/datasets/%s/parquet/%s/%s", strings.TrimRight(h.Endpoint, "/"), s.Repo, s.config(), s.split())
	req, err := h.request(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %v", s.Name, err)
	}
	resp, err := h.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: cannot reach the hub (%v); check the network, or use a local Hugging Face cache (HF_HUB_OFFLINE=1)", s.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, httpError(s, "the list of Parquet files", resp)
	}
	var urls []string
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&urls); err != nil {
		return nil, fmt.Errorf("dataset: %s: the hub's list of Parquet files is not a JSON list of URLs: %v", s.Name, err)
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("dataset: %s: the hub lists no Parquet files for config %q, split %q", s.Name, s.config(), s.split())
	}
	return urls, nil
}

// download fetches url into path via path.part, resuming the part file
// with a range request after a dropped connection (up to Retries times)
// or when an earlier process left it.
func (h *Hub) download(ctx context.Context, s *Source, url, path string) error {
	part := path + ".part"
	retries := h.Retries
	if retries == 0 {
		retries = 5
	}
	name := filepath.Base(path)
	for attempt := 0; ; attempt++ {
		done, err := h.fetch(ctx, s, url, part, name)
		if err == nil && done {
			break
		}
		var fatal fatalError
		if errors.As(err, &fatal) || ctx.Err() != nil || attempt >= retries {
			if err == nil {
				err = errors.New("the download kept stopping short")
			}
			if errors.As(err, &fatal) {
				return fatal.error
			}
			return fmt.Errorf("dataset: %s: downloading %s failed after %d attempts (%v); run again to resume it", s.Name, url, attempt+1, err)
		}
		if h.Log != nil {
			fmt.Fprintf(h.Log, "%s: %s: connection dropped (%v); resuming\n", s.Name, name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	if err := os.Rename(part, path); err != nil {
		return fmt.Errorf("dataset: %s: %v", s.Name, err)
	}
	atomicfile.SyncDir(filepath.Dir(path))
	return nil
}

type fatalError struct{ error }

// fetch appends what the server sends after part's current length. It
// reports done when the file is complete.
func (h *Hub) fetch(ctx context.Context, s *Source, url, part, name string) (bool, error) {
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return false, fatalError{fmt.Errorf("dataset: %s: %v", s.Name, err)}
	}
	defer f.Close()
	have, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return false, fatalError{err}
	}
	req, err := h.request(ctx, url)
	if err != nil {
		return false, fatalError{fmt.Errorf("dataset: %s: %v", s.Name, err)}
	}
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	resp, err := h.client().Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	total := int64(-1)
	switch resp.StatusCode {
	case http.StatusOK: // the whole file: start over
		if err := f.Truncate(0); err != nil {
			return false, fatalError{err}
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return false, fatalError{err}
		}
		have, total = 0, resp.ContentLength
	case http.StatusPartialContent:
		if cr := resp.Header.Get("Content-Range"); cr != "" {
			var a, b, t int64
			if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &a, &b, &t); err == nil {
				if a != have {
					return false, fatalError{fmt.Errorf("dataset: %s: the hub resumed %s at byte %d, not %d", s.Name, name, a, have)}
				}
				total = t
			}
		}
	case http.StatusRequestedRangeNotSatisfiable:
		if have > 0 { // the part file is complete already
			return true, nil
		}
		return false, fatalError{httpError(s, name, resp)}
	default:
		return false, fatalError{httpError(s, name, resp)}
	}
	start, last := time.Now(), time.Now()
	buf := make([]byte, 1<<20)
	got := have
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := f.Write(buf[:n]); err != nil {
				return false, fatalError{fmt.Errorf("dataset: %s: writing %s: %v", s.Name, part, err)}
			}
			got += int64(n)
			if h.Log != nil && time.Since(last) > time.Second {
				last = time.Now()
				rate := float64(got-have) / time.Since(start).Seconds()
				of := ""
				if total > 0 {
					of = " of " + strconv.FormatFloat(float64(total)/1e6, 'f', 1, 64) + " MB"
				}
				fmt.Fprintf(h.Log, "%s: %s: %.1f MB%s (%.1f MB/s)\n", s.Name, name, float64(got)/1e6, of, rate/1e6)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return false, rerr // dropped: resume
		}
	}
	if total >= 0 && got < total {
		return false, fmt.Errorf("stopped at byte %d of %d", got, total)
	}
	if err := f.Sync(); err != nil {
		return false, fatalError{err}
	}
	return true, nil
}
