package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// vulndbModule is the module whose data/osv folder the database is built
// from; its version comes from this module's go.mod.
const vulndbModule = "golang.org/x/vulndb"

// vulndbSource is the downloaded vulndb module: the version this module
// pins and the folder the go command extracted it to.
type vulndbSource struct {
	Version string
	Dir     string
}

// downloadVulndb has the go command download the pinned vulndb module
// (verified against go.sum) and says where it is. toolDir is this module's
// folder.
func downloadVulndb(ctx context.Context, toolDir string) (vulndbSource, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", vulndbModule)
	cmd.Dir = toolDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	// go mod download -json reports a module's own failure in the JSON
	// and exits non-zero: read the JSON first, it says more.
	var m struct {
		Version, Dir, Error string
	}
	if jerr := json.Unmarshal(out, &m); jerr == nil && m.Error != "" {
		return vulndbSource{}, fmt.Errorf("downloading %s: %s", vulndbModule, m.Error)
	}
	if err != nil {
		return vulndbSource{}, fmt.Errorf("downloading %s: %w: %s", vulndbModule, err, stderr.Bytes())
	}
	if m.Version == "" || m.Dir == "" {
		return vulndbSource{}, fmt.Errorf("downloading %s: go mod download named no version and folder: %s", vulndbModule, out)
	}
	return vulndbSource{Version: m.Version, Dir: m.Dir}, nil
}

// cachedDBDir is where the database built from vulndb at version is kept.
func cachedDBDir(cacheRoot, version string) string {
	return filepath.Join(cacheRoot, "proxykit", "vulndb", version)
}

// indexer builds a database in out from a folder of OSV files. The real
// one is vulndb's cmd/indexdb; tests stand in for it to see when it runs.
type indexer func(ctx context.Context, osvDir, out string) error

// goToolIndexdb returns the indexer that runs vulndb's cmd/indexdb as a
// tool of the module in toolDir, its output going to log.
func goToolIndexdb(toolDir string, log io.Writer) indexer {
	return func(ctx context.Context, osvDir, out string) error {
		cmd := exec.CommandContext(ctx, "go", "tool", "indexdb", "-vulns", osvDir, "-out", out)
		cmd.Dir = toolDir
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go tool indexdb -vulns %s: %w", osvDir, err)
		}
		return nil
	}
}

// ensureDB returns the database built from src, building it with index
// into dir first unless a complete one is there. The build goes to a
// temporary folder renamed into place, so that an interrupted build is
// never taken for a database.
func ensureDB(ctx context.Context, src vulndbSource, dir string, index indexer) error {
	if _, err := os.Stat(filepath.Join(dir, "index", "db.json")); err == nil {
		return nil
	}
	osvDir := filepath.Join(src.Dir, "data", "osv")
	if _, err := os.Stat(osvDir); err != nil {
		return fmt.Errorf("%s@%s has no OSV folder: %w", vulndbModule, src.Version, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("vulnerability database cache: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("vulnerability database cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := index(ctx, osvDir, tmp); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(tmp, "index", "db.json")); err != nil {
		return fmt.Errorf("building the vulnerability database from %s@%s: no index/db.json: %w", vulndbModule, src.Version, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another run built the same version at the same time: its copy
		// is as good as ours.
		if _, serr := os.Stat(filepath.Join(dir, "index", "db.json")); serr == nil {
			return nil
		}
		return fmt.Errorf("vulnerability database cache: %w", err)
	}
	return nil
}
