package images

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
)

// hostTool is a program of the machine's Debian packages that the suite's
// shell snippets run inside pods.
type hostTool struct {
	src, dst string // path on the host, path in the image
	pkg      string // the Debian package that installs src
}

// hostTools are the tools of the agnhost image (and of the others sharing
// its layer). busybox supplies the small ones; these replace busybox's
// where the suite needs the real thing: its sh runs its own nc, which
// rejects -v, and its wget crashed in the trial.
func hostTools() []hostTool {
	return []hostTool{
		{src: "/bin/busybox", dst: "/bin/busybox", pkg: "busybox-static"},
		{src: "/bin/dash", dst: "/bin/dash", pkg: "dash"},
		{src: "/bin/nc.openbsd", dst: "/bin/nc", pkg: "netcat-openbsd"},
		{src: "/usr/bin/curl", dst: "/usr/bin/curl", pkg: "curl"},
		{src: "/usr/bin/wget", dst: "/usr/bin/wget", pkg: "wget"},
		{src: "/usr/sbin/conntrack", dst: "/usr/sbin/conntrack", pkg: "conntrack"},
	}
}

// shadowed are the busybox applets that a host tool (or /bin/sh -> dash)
// replaces.
func shadowed() map[string]bool {
	return map[string]bool{"sh": true, "nc": true, "wget": true}
}

// MissingToolError says which host program is missing and which Debian
// package installs it.
type MissingToolError struct {
	Path, Package string
}

func (e *MissingToolError) Error() string {
	return fmt.Sprintf("%s is missing: apt-get install %s", e.Path, e.Package)
}

// toolFiles is the tools layer: the host tools, busybox's applets as
// symlinks, dash as /bin/sh, every shared library they load and the
// dynamic loader, and the few files of /etc that libc and the tools read.
func toolFiles(ctx context.Context, tools []hostTool) ([]file, error) {
	var files []file
	var bins []string
	for _, t := range tools {
		st, err := os.Stat(t.src)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &MissingToolError{Path: t.src, Package: t.pkg}
		}
		if err != nil {
			return nil, err
		}
		files = append(files, copyOf(t.dst, t.src, st.Mode().Perm()))
		bins = append(bins, t.src)
	}
	applets, err := busyboxApplets(ctx, "/bin/busybox")
	if err != nil {
		return nil, err
	}
	for _, a := range applets {
		if !shadowed()[a] {
			files = append(files, symlink("/bin/"+a, "busybox"))
		}
	}
	libs, err := sharedLibraries(bins, libraryDirs(runtime.GOARCH))
	if err != nil {
		return nil, err
	}
	for _, l := range libs {
		st, err := os.Stat(l)
		if err != nil {
			return nil, err
		}
		files = append(files, copyOf(l, l, st.Mode().Perm()))
	}
	return append(files,
		symlink("/bin/sh", "dash"),
		literal("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"),
		literal("/etc/group", "root:x:0:\nnogroup:x:65534:\n"),
		literal("/etc/nsswitch.conf", "hosts: files dns\n"),
		directory("/tmp", os.ModeSticky|0o777),
		directory("/root", 0o700),
		directory("/dev", 0o755), directory("/proc", 0o555), directory("/sys", 0o555),
	), nil
}

// busyboxApplets asks busybox for the applets it was built with.
func busyboxApplets(ctx context.Context, busybox string) ([]string, error) {
	out, err := exec.CommandContext(ctx, busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", busybox, err)
	}
	var applets []string
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			applets = append(applets, a)
		}
	}
	return applets, nil
}

// libraryDirs are the directories the dynamic loader searches without a
// cache, Debian's multiarch ones first.
func libraryDirs(goarch string) []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[goarch]
	return []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
}

// sharedLibraries lists what the dynamic loader would load for bins: each
// one's interpreter and, transitively, every DT_NEEDED library, resolved
// as the loader does (RUNPATH, then dirs, skipping another architecture's
// files). The paths are where the image needs them: where the loader
// found them on the host.
func sharedLibraries(bins, dirs []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	queue := append([]string(nil), bins...)
	for len(queue) > 0 {
		bin := queue[0]
		queue = queue[1:]
		f, err := elf.Open(bin)
		if err != nil {
			return nil, fmt.Errorf("shared libraries of %s: %w", bin, err)
		}
		deps, err := elfDeps(f, bin, dirs)
		f.Close()
		if err != nil {
			return nil, err
		}
		for _, d := range deps {
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
				queue = append(queue, d)
			}
		}
	}
	return out, nil
}

// elfDeps are one ELF file's interpreter and resolved DT_NEEDED entries.
func elfDeps(f *elf.File, name string, dirs []string) ([]string, error) {
	var deps []string
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return nil, fmt.Errorf("interpreter of %s: %w", name, err)
		}
		deps = append(deps, string(bytes.TrimRight(b, "\x00")))
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("DT_NEEDED of %s: %w", name, err)
	}
	search := dirs
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		paths, _ := f.DynString(tag)
		for _, p := range paths {
			for _, d := range filepath.SplitList(p) {
				search = append([]string{strings.ReplaceAll(d, "$ORIGIN", path.Dir(name))}, search...)
			}
		}
	}
	for _, lib := range needed {
		p, err := resolve(lib, search, f.Class, f.Machine)
		if err != nil {
			return nil, fmt.Errorf("%s needs %s: %w", name, lib, err)
		}
		deps = append(deps, p)
	}
	return deps, nil
}

// resolve finds lib in dirs with the class and machine of the program
// that needs it.
func resolve(lib string, dirs []string, class elf.Class, machine elf.Machine) (string, error) {
	if strings.Contains(lib, "/") {
		return lib, nil
	}
	for _, d := range dirs {
		p := filepath.Join(d, lib)
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		ok := f.Class == class && f.Machine == machine
		f.Close()
		if ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in %s", strings.Join(dirs, ", "))
}
