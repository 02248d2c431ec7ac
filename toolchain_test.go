package proxykit

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestToolchainNamedEverywhere: a Go whose go.env says GOTOOLCHAIN=local
// ignores go.mod's toolchain line and builds with itself, vulnerable
// standard library and all (README, "Go versions"). So the toolchain the
// root go.mod names is the one every module's go.mod, .ci/run, each go
// command at the top of the README and the node agent's Containerfile name.
func TestToolchainNamedEverywhere(t *testing.T) {
	want := toolchainOf(t, "go.mod")
	if want == "" {
		t.Fatal("go.mod has no toolchain line")
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			if got := toolchainOf(t, path); got != want {
				t.Errorf("%s: toolchain %q, want %q as go.mod says", path, got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if ci := readFile(t, ".ci/run"); !strings.Contains(ci, "\nexport GOTOOLCHAIN="+want+"\n") {
		t.Errorf(".ci/run does not export GOTOOLCHAIN=%s", want)
	}

	readme := readFile(t, "README.md")
	top := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(readme)
	if top == nil {
		t.Fatal("README.md has no sh block")
	}
	for _, line := range strings.Split(strings.TrimSpace(top[1]), "\n") {
		command, _, _ := strings.Cut(line, " #")
		for _, c := range strings.Split(command, "&&") {
			if c = strings.TrimSpace(c); !strings.HasPrefix(c, "GOTOOLCHAIN="+want+" go ") {
				t.Errorf("README.md's %q does not start with GOTOOLCHAIN=%s", c, want)
			}
		}
	}

	containerfile := readFile(t, "examples/nodeagent/Containerfile")
	image := regexp.MustCompile(`(?m)^FROM \S*/golang:(\S+?)-\S* AS build$`).FindStringSubmatch(containerfile)
	if image == nil || "go"+image[1] != want {
		t.Errorf("the Containerfile's build image is not golang:%s-...: %q", strings.TrimPrefix(want, "go"), image)
	}
}

// toolchainOf returns the toolchain line's version in a go.mod, "" when
// it has none.
func toolchainOf(t *testing.T, gomod string) string {
	m := regexp.MustCompile(`(?m)^toolchain (\S+)$`).FindStringSubmatch(readFile(t, gomod))
	if m == nil {
		return ""
	}
	return m[1]
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
