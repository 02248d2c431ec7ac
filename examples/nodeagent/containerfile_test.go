package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestContainerfileBinaryIsStatic builds the binary as the Containerfile
// does and checks that it needs no dynamic loader or library: the image's
// base has none of Go's build.
func TestContainerfileBinaryIsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent")
	}
	data, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	build := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0) go build (.*) -o (\S+) (\.)$`).FindStringSubmatch(string(data))
	if build == nil {
		t.Fatalf("no CGO_ENABLED=0 go build ... -o OUT . in the Containerfile:\n%s", data)
	}
	if want := "COPY --from=build " + build[3] + " /usr/local/bin/nodeagent\n"; !strings.Contains(string(data), want) {
		t.Errorf("the Containerfile does not copy the binary it builds: no %q", want)
	}
	out := filepath.Join(t.TempDir(), "nodeagent")
	// -trimpath changes only file names, not how the binary links, and
	// would rebuild every package outside the test's build cache.
	args := []string{"build"}
	for _, f := range strings.Fields(build[2]) {
		if f != "-trimpath" {
			args = append(args, f)
		}
	}
	cmd := exec.Command("go", append(args, "-o", out, ".")...)
	cmd.Env = append(os.Environ(), build[1])
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is not static", p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs libraries %v (%v)", libs, err)
	}
}
