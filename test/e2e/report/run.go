package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/proxykit/proxykit/test/e2e/suite"
)

// Programs a Run's Proxy names.
const (
	ProgramProxykit  = "proxykit"
	ProgramKubeProxy = "kube-proxy"
)

// Run is one run of the suite: a proxy in one mode on a cluster of Nodes
// nodes.
type Run struct {
	Nodes  int
	Proxy  string    // program and mode: "proxykit iptables", "kube-proxy iptables"
	Commit string    // the checkout the agent was built from ("-dirty" when it had changes)
	Date   time.Time // when the suite started
	Kernel string    `json:",omitempty"` // the machine's kernel release
	Cores  int       `json:",omitempty"` // the machine's CPUs
	Result suite.Result
}

var proxyName = regexp.MustCompile(`^[a-z][a-z0-9-]* [a-z][a-z0-9-]*$`)

// Program returns the program of r.Proxy ("proxykit", "kube-proxy").
func (r Run) Program() string { p, _, _ := strings.Cut(r.Proxy, " "); return p }

// Mode returns the proxy mode of r.Proxy ("iptables", ...).
func (r Run) Mode() string { _, m, _ := strings.Cut(r.Proxy, " "); return m }

// FileName is where r is stored under the results directory:
// "<nodes>node-<program>-<mode>.json", so that a later run of the same
// proxy, mode and node count replaces it and no other.
func (r Run) FileName() string {
	return fmt.Sprintf("%dnode-%s.json", r.Nodes, strings.ReplaceAll(r.Proxy, " ", "-"))
}

func (r Run) check() error {
	if r.Nodes < 1 {
		return fmt.Errorf("run of %q: %d nodes", r.Proxy, r.Nodes)
	}
	if !proxyName.MatchString(r.Proxy) {
		return fmt.Errorf("run on %d nodes: proxy %q is not \"<program> <mode>\"", r.Nodes, r.Proxy)
	}
	return nil
}

// Save writes r into dir (created if missing) as FileName, replacing the
// earlier run of the same proxy, mode and node count.
func Save(dir string, r Run) error {
	if err := r.check(); err != nil {
		return err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	// Failure messages read as they were written ("<", ">", "&" unescaped).
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("encoding run %s: %w", r.FileName(), err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results directory: %w", err)
	}
	return writeFile(filepath.Join(dir, r.FileName()), b.Bytes())
}

// Load reads every run stored in dir, ordered as the report shows them.
func Load(dir string) ([]Run, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*node-*.json"))
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	runs := make([]Run, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading a stored run: %w", err)
		}
		var r Run
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("reading stored run %s: %w", p, err)
		}
		if err := r.check(); err != nil {
			return nil, fmt.Errorf("stored run %s: %w", p, err)
		}
		if filepath.Base(p) != r.FileName() {
			return nil, fmt.Errorf("stored run %s holds %s", p, r.FileName())
		}
		runs = append(runs, r)
	}
	slices.SortFunc(runs, compareRuns)
	return runs, nil
}

// compareRuns orders runs by node count, kube-proxy before proxykit (so
// the baseline stands beside ours), then by mode.
func compareRuns(a, b Run) int {
	if a.Nodes != b.Nodes {
		return a.Nodes - b.Nodes
	}
	if pa, pb := programRank(a.Program()), programRank(b.Program()); pa != pb {
		return pa - pb
	}
	if a.Program() != b.Program() {
		return strings.Compare(a.Program(), b.Program())
	}
	if ma, mb := modeRank(a.Mode()), modeRank(b.Mode()); ma != mb {
		return ma - mb
	}
	return strings.Compare(a.Mode(), b.Mode())
}

func programRank(p string) int {
	switch p {
	case ProgramKubeProxy:
		return 0
	case ProgramProxykit:
		return 1
	}
	return 2
}

func modeRank(m string) int {
	if i := slices.Index([]string{"iptables", "nftables", "userspace", "ipvs"}, m); i >= 0 {
		return i
	}
	return 4
}

// Write regenerates the report at path from every run stored in dir.
func Write(dir, path string) error {
	runs, err := Load(dir)
	if err != nil {
		return err
	}
	return writeFile(path, Markdown(runs))
}

// writeFile replaces path whole: a reader never sees half a file.
func writeFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
