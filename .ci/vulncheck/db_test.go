package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeSource is a vulndb module folder with an empty OSV folder.
func fakeSource(t *testing.T) vulndbSource {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "data", "osv"), 0o755); err != nil {
		t.Fatal(err)
	}
	return vulndbSource{Version: "v0.0.0-20261105234957-e22db6528018", Dir: dir}
}

// writeIndex stands in for indexdb: it writes the file that marks a
// complete database.
func writeIndex(_ context.Context, _, out string) error {
	if err := os.MkdirAll(filepath.Join(out, "index"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "index", "db.json"), []byte(`{"modified":"2026-11-05T23:49:57Z"}`), 0o644)
}

// entries lists a folder, "" when it does not exist.
func entries(t *testing.T, dir string) []string {
	des, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestEnsureDBBuildsOncePerVersion(t *testing.T) {
	src := fakeSource(t)
	cache := t.TempDir()
	dir := cachedDBDir(cache, src.Version)
	if want := filepath.Join(cache, "proxykit", "vulndb", src.Version); dir != want {
		t.Errorf("cachedDBDir = %s, want %s", dir, want)
	}
	builds := 0
	index := func(ctx context.Context, osvDir, out string) error {
		builds++
		if want := filepath.Join(src.Dir, "data", "osv"); osvDir != want {
			t.Errorf("indexed %s, want %s", osvDir, want)
		}
		return writeIndex(ctx, osvDir, out)
	}
	for range 2 {
		if err := ensureDB(t.Context(), src, dir, index); err != nil {
			t.Fatal(err)
		}
	}
	if builds != 1 {
		t.Errorf("built %d times, want once", builds)
	}
	// Nothing but the database is left beside it.
	if diff := cmp.Diff([]string{src.Version}, entries(t, filepath.Dir(dir))); diff != "" {
		t.Errorf("cache folder (-want +got):\n%s", diff)
	}
}

func TestEnsureDBKeepsNoFailedBuild(t *testing.T) {
	for _, tc := range []struct {
		name  string
		index indexer
	}{{
		name: "indexdb fails halfway",
		index: func(ctx context.Context, osvDir, out string) error {
			_ = writeIndex(ctx, osvDir, out)
			return errors.New("killed")
		},
	}, {
		name:  "indexdb writes no index",
		index: func(context.Context, string, string) error { return nil },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			src := fakeSource(t)
			dir := cachedDBDir(t.TempDir(), src.Version)
			if err := ensureDB(t.Context(), src, dir, tc.index); err == nil {
				t.Fatal("ensureDB succeeded, want an error")
			}
			if got := entries(t, filepath.Dir(dir)); len(got) > 0 {
				t.Errorf("a failed build left %v in the cache", got)
			}
			// The next run builds afresh.
			if err := ensureDB(t.Context(), src, dir, writeIndex); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestEnsureDBNeedsTheOSVFolder(t *testing.T) {
	src := vulndbSource{Version: "v0.0.1", Dir: t.TempDir()}
	err := ensureDB(t.Context(), src, cachedDBDir(t.TempDir(), src.Version), writeIndex)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ensureDB with no data/osv: %v, want a not-exist error", err)
	}
}
