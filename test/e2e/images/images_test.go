package images

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/proxykit/proxykit/test/e2e/build"
)

// skipWithoutTools skips where the host lacks a tool the images copy.
func skipWithoutTools(t *testing.T) {
	t.Helper()
	for _, tl := range hostTools() {
		if _, err := os.Stat(tl.src); err != nil {
			t.Skipf("%s missing (apt-get install %s)", tl.src, tl.pkg)
		}
	}
}

// fakeBinaries stands in for the built programs: the layers copy them
// whatever they hold.
func fakeBinaries(t *testing.T) build.Binaries {
	t.Helper()
	dir := t.TempDir()
	b := build.Binaries{
		Pause:                filepath.Join(dir, "pause"),
		Agnhost:              filepath.Join(dir, "agnhost"),
		RegressionIssue74839: filepath.Join(dir, "boom"),
	}
	for _, p := range []string{b.Pause, b.Agnhost, b.RegressionIssue74839} {
		if err := os.WriteFile(p, []byte(filepath.Base(p)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// entry is what the test checks of a layer entry.
type entry struct {
	typ  byte
	mode int64
	link string
}

// layerFiles memoizes each layer's entries by digest: the images share
// the tools layer, and decompressing it once keeps the test fast under
// -race.
type layerFiles map[v1.Hash]map[string]entry

// contents reads the tarball at p back as tag and returns its config's
// entrypoint and cmd, and its flattened filesystem (the layers hold no
// whiteouts, so the union of their entries is the filesystem).
func (memo layerFiles) contents(t *testing.T, p, tag string) (entrypoint, cmd []string, fs map[string]entry) {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(p, &ref)
	if err != nil {
		t.Fatalf("%s as %s: %v", p, tag, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("%s: platform %s/%s, want linux/%s", tag, cf.OS, cf.Architecture, runtime.GOARCH)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	fs = map[string]entry{}
	for _, l := range layers {
		for p, e := range memo.files(t, l) {
			fs[p] = e
		}
	}
	return cf.Config.Entrypoint, cf.Config.Cmd, fs
}

func (memo layerFiles) files(t *testing.T, l v1.Layer) map[string]entry {
	t.Helper()
	digest, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if files, ok := memo[digest]; ok {
		return files
	}
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files["/"+filepath.Clean(h.Name)] = entry{typ: h.Typeflag, mode: h.Mode, link: h.Linkname}
	}
	memo[digest] = files
	return files
}

func TestBuild(t *testing.T) {
	skipWithoutTools(t)
	ctx := context.Background()
	dir := t.TempDir()
	paths, err := Build(ctx, dir, fakeBinaries(t))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, p := range paths {
		files = append(files, filepath.Base(p))
	}
	if diff := cmp.Diff([]string{"pause.tar", "agnhost.tar", "busybox.tar", "distroless-iptables.tar", "regression-issue-74839.tar"}, files); diff != "" {
		t.Errorf("tarballs (-want +got):\n%s", diff)
	}

	var bins []string
	for _, tl := range hostTools() {
		bins = append(bins, tl.src)
	}
	libs, err := sharedLibraries(bins, libraryDirs(runtime.GOARCH))
	if err != nil {
		t.Fatal(err)
	}
	// What the suite's shell snippets run, and the loader and libraries
	// the dynamic ones among them need.
	tools := []string{"/bin/sh", "/bin/dash", "/bin/nc", "/bin/busybox", "/usr/bin/curl", "/usr/bin/wget", "/usr/sbin/conntrack",
		"/bin/nslookup", "/bin/sleep", "/bin/cat", "/bin/grep", "/bin/which", "/bin/test", "/bin/hostname", "/bin/ip",
		"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/tmp"}
	tools = append(tools, libs...)
	memo := layerFiles{}

	for _, tc := range []struct {
		path, tag       string
		entrypoint, cmd []string
		has             []string
		hasNot          []string
	}{
		{path: paths[0], tag: Pause, entrypoint: []string{"/pause"}, has: []string{"/pause"}, hasNot: []string{"/bin/sh"}},
		{path: paths[1], tag: Agnhost, entrypoint: []string{"/agnhost"}, cmd: []string{"pause"}, has: append([]string{"/agnhost", "/uploads"}, tools...)},
		{path: paths[2], tag: BusyBox, cmd: []string{"sh"}, has: tools, hasNot: []string{"/agnhost"}},
		{path: paths[3], tag: DistrolessIptables, has: tools},
		{path: paths[4], tag: RegressionIssue74839, entrypoint: []string{"/regression-issue-74839"}, has: append([]string{"/regression-issue-74839"}, tools...)},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			entrypoint, cmd, fs := memo.contents(t, tc.path, tc.tag)
			if diff := cmp.Diff(tc.entrypoint, entrypoint); diff != "" {
				t.Errorf("entrypoint (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.cmd, cmd); diff != "" {
				t.Errorf("cmd (-want +got):\n%s", diff)
			}
			for _, p := range tc.has {
				if _, ok := fs[p]; !ok {
					t.Errorf("%s missing", p)
				}
			}
			for _, p := range tc.hasNot {
				if _, ok := fs[p]; ok {
					t.Errorf("%s present", p)
				}
			}
		})
	}

	t.Run("tools run in the image", func(t *testing.T) { toolsRun(t, paths[1]) })

	// The details the trial found pods need.
	_, _, fs := memo.contents(t, paths[1], Agnhost)
	for p, want := range map[string]entry{
		"/bin/sh":   {typ: tar.TypeSymlink, mode: 0o777, link: "dash"},
		"/bin/nc":   {typ: tar.TypeReg, mode: 0o755},
		"/bin/wget": {}, // busybox's: shadowed by GNU wget in /usr/bin
		"/bin/ls":   {typ: tar.TypeSymlink, mode: 0o777, link: "busybox"},
		"/tmp":      {typ: tar.TypeDir, mode: 0o1777},
	} {
		if got := fs[p]; got != want {
			t.Errorf("%s: %+v, want %+v", p, got, want)
		}
	}
}

// A second Build with the same inputs keeps every tarball; a changed
// binary rewrites only the images that hold it.
func TestBuildReuses(t *testing.T) {
	skipWithoutTools(t)
	ctx := context.Background()
	dir := t.TempDir()
	bins := fakeBinaries(t)
	paths, err := Build(ctx, dir, bins)
	if err != nil {
		t.Fatal(err)
	}
	stamp := func() map[string]uint64 {
		m := map[string]uint64{}
		for _, p := range paths {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			m[filepath.Base(p)] = st.Sys().(*syscall.Stat_t).Ino
		}
		return m
	}
	before := stamp()
	if _, err := Build(ctx, dir, bins); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, stamp()); diff != "" {
		t.Errorf("unchanged inputs rewrote (-before +after):\n%s", diff)
	}
	if err := os.WriteFile(bins.Pause, []byte("pause v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(ctx, dir, bins); err != nil {
		t.Fatal(err)
	}
	after := stamp()
	var rewritten []string
	for _, p := range paths {
		f := filepath.Base(p)
		if before[f] != after[f] {
			rewritten = append(rewritten, f)
		}
	}
	if diff := cmp.Diff([]string{"pause.tar"}, rewritten); diff != "" {
		t.Errorf("rewritten after pause changed (-want +got):\n%s", diff)
	}
}

func TestMissingToolNamesPackage(t *testing.T) {
	tools := []hostTool{{src: filepath.Join(t.TempDir(), "nc.openbsd"), dst: "/bin/nc", pkg: "netcat-openbsd"}}
	_, err := toolFiles(context.Background(), tools)
	var missing *MissingToolError
	if !errors.As(err, &missing) || missing.Package != "netcat-openbsd" {
		t.Fatalf("toolFiles with a missing tool: %v, want a MissingToolError naming netcat-openbsd", err)
	}
}

func TestSharedLibraries(t *testing.T) {
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("no /usr/bin/curl (apt-get install curl)")
	}
	libs, err := sharedLibraries([]string{"/usr/bin/curl"}, libraryDirs(runtime.GOARCH))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, l := range libs {
		got[filepath.Base(l)] = true
		if _, err := os.Stat(l); err != nil {
			t.Errorf("resolved %s: %v", l, err)
		}
	}
	// curl's own library, one it loads only through libcurl, libc, and
	// the loader named by PT_INTERP.
	for _, want := range []string{"libcurl.so.4", "libnghttp2.so.14", "libc.so.6", "ld-linux-x86-64.so.2"} {
		if runtime.GOARCH == "amd64" && !got[want] {
			t.Errorf("%s not among curl's libraries %v", want, libs)
		}
	}
}
