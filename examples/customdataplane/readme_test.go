package customdataplane_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeCode checks that every Go block of the tutorial is copied from
// the package's files, so that following it gives this code.
func TestReadmeCode(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, string(b))
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go blocks")
	}
	for _, b := range blocks {
		found := false
		for _, src := range sources {
			found = found || strings.Contains(src, b[1])
		}
		if !found {
			t.Errorf("README.md block not found in any of %v:\n%s", files, b[1])
		}
	}
}
