package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWriteConfigToReplacesNotFollows: --write-config-to replaces what is
// at the path with a new file of mode 0600: a symlink planted there is
// replaced and the file it points at left as it was, an existing file's
// looser mode does not survive, and no temporary file is left, on success
// or on failure.
func TestWriteConfigToReplacesNotFollows(t *testing.T) {
	dir := t.TempDir()
	precious := filepath.Join(dir, "precious")
	if err := os.WriteFile(precious, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "planted.yaml")
	if err := os.Symlink(precious, link); err != nil {
		t.Fatal(err)
	}
	loose := filepath.Join(dir, "loose.yaml")
	if err := os.WriteFile(loose, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{link, loose, filepath.Join(dir, "new.yaml")} {
		if code, _, errOut := runAgent(t, "--write-config-to", path); code != exitOK {
			t.Fatalf("--write-config-to %s: exit %d, stderr:\n%s", path, code, errOut)
		}
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v, want a regular file of mode 0600", path, fi.Mode())
		}
		if data, err := os.ReadFile(path); err != nil || !strings.Contains(string(data), "kind: KubeProxyConfiguration\n") {
			t.Errorf("%s holds %q (%v), want the configuration", path, data, err)
		}
	}
	if data, err := os.ReadFile(precious); err != nil || string(data) != "keep me\n" {
		t.Errorf("the symlink's target now holds %q (%v), want it untouched", data, err)
	}

	// A destination that cannot be replaced fails, leaving nothing.
	sub := filepath.Join(dir, "a-directory")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runAgent(t, "--write-config-to", sub); code != exitFailure || !strings.Contains(errOut, "nodeagent: --write-config-to "+sub+": ") {
		t.Errorf("--write-config-to a directory: exit %d, stderr:\n%s", code, errOut)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"a-directory", "loose.yaml", "new.yaml", "planted.yaml", "precious"}, names); diff != "" {
		t.Errorf("files in the folder (-want +got):\n%s", diff)
	}
}
