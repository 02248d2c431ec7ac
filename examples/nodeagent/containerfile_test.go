package main

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
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

// TestContainerfileContext: the build context, the repository's root as
// the README builds it, is what the repository's .dockerignore leaves:
// every file the build compiles or embeds and both modules' go.mod and
// go.sum are sent; the history, the other modules and examples, test data
// and a binary built at the root are not.
func TestContainerfileContext(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ignore := readDockerignore(t, filepath.Join(root, ".dockerignore"))
	need := []string{"go.mod", "go.sum", "examples/nodeagent/go.mod", "examples/nodeagent/go.sum", "examples/nodeagent/Containerfile"}
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}`, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		rel, err := filepath.Rel(root, f[0])
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue // the standard library or the module cache
		}
		for _, name := range f[1:] {
			need = append(need, filepath.ToSlash(filepath.Join(rel, name)))
		}
	}
	if len(need) < 50 {
		t.Fatalf("go list named only %d files of the repository: %v", len(need), need)
	}
	for _, p := range need {
		if ignore.excludes(p) {
			t.Errorf("%s is needed by the build but .dockerignore leaves it out", p)
		}
	}
	for _, p := range []string{".git/HEAD", ".git/objects/pack/x.pack", ".ci/run", "bench/go.mod", "test/cluster/go.mod",
		"testdata/ownsource/main.go", "examples/lab/main.go", "examples/nodeagent/testdata/kubeproxyconfig/kubeadm-defaults.yaml", "nodeagent"} {
		if !ignore.excludes(p) {
			t.Errorf("%s is sent to the build; .dockerignore should leave it out", p)
		}
	}
}

// dockerignore is a .dockerignore's patterns, in order.
type dockerignore []struct {
	pattern string
	keep    bool
}

// readDockerignore reads the patterns as Docker and Buildah read them:
// one per line, "#" comments and blank lines skipped, a leading "!"
// keeping what earlier patterns left out, a leading "/" meaning the root.
// "**" is refused: excludes does not implement it.
func readDockerignore(t *testing.T, file string) dockerignore {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d dockerignore
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		keep := strings.HasPrefix(l, "!")
		l = path.Clean(strings.TrimPrefix(strings.TrimPrefix(l, "!"), "/"))
		if strings.Contains(l, "**") {
			t.Fatalf("%s: %q: the test does not implement \"**\"", file, l)
		}
		if _, err := path.Match(l, ""); err != nil {
			t.Fatalf("%s: %q: %v", file, l, err)
		}
		d = append(d, struct {
			pattern string
			keep    bool
		}{l, keep})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// excludes reports whether p (slash-separated, relative to the context's
// root) stays out of the context: the last pattern that matches p or a
// folder holding it decides.
func (d dockerignore) excludes(p string) bool {
	var prefixes []string
	for dir := p; dir != "." && dir != "/"; dir = path.Dir(dir) {
		prefixes = append(prefixes, dir)
	}
	out := false
	for _, pat := range d {
		if slices.ContainsFunc(prefixes, func(q string) bool { ok, _ := path.Match(pat.pattern, q); return ok }) {
			out = !pat.keep
		}
	}
	return out
}

// TestContainerfileImagesPinnable: each base image's FROM line takes a
// digest from a build argument declared before the first FROM (empty by
// default), and the README says how to fill each in.
func TestContainerfileImagesPinnable(t *testing.T) {
	data, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	firstFrom := strings.Index(string(data), "\nFROM ")
	froms := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllStringSubmatch(string(data), -1)
	if len(froms) != 2 {
		t.Fatalf("want the build's and the runtime's FROM, got %q", froms)
	}
	for _, m := range froms {
		arg := regexp.MustCompile(`^docker\.io/library/[a-z]+:[^$@]+\$\{([A-Z_]+_DIGEST)\}$`).FindStringSubmatch(m[1])
		if arg == nil {
			t.Errorf("FROM %s: want IMAGE:TAG${NAME_DIGEST}, so that a digest can pin it", m[1])
			continue
		}
		if decl := strings.Index(string(data), "\nARG "+arg[1]+"=\n"); decl < 0 || decl > firstFrom {
			t.Errorf("no \"ARG %s=\" (empty) before the first FROM", arg[1])
		}
		if !strings.Contains(string(readme), "--build-arg "+arg[1]+"=@sha256:") {
			t.Errorf("README.md does not show --build-arg %s=@sha256:...", arg[1])
		}
	}
}
