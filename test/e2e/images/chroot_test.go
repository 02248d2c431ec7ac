package images

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// toolsRun checks that the tools of the agnhost image at p run inside its
// filesystem alone: every library they load is in the layer. It runs them
// in a chroot, which needs root.
func toolsRun(t *testing.T, p string) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	root := t.TempDir()
	extract(t, p, Agnhost, root)
	// One line each: nc must be OpenBSD's (it takes -v), wget GNU's, sh
	// dash (busybox's sh would run busybox's nc).
	script := `nc -h 2>&1 | head -n 1; curl --version | head -n 1; wget --version | head -n 1; conntrack --version; readlink /bin/sh; nslookup 2>&1 | head -n 1`
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = []string{envPath}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tools in the image: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{"OpenBSD netcat", "curl ", "GNU Wget", "conntrack v", "dash", "BusyBox"}
	if len(lines) != len(want) {
		t.Fatalf("output %q, want %d lines starting %q", out, len(want), want)
	}
	for i, prefix := range want {
		if !strings.HasPrefix(lines[i], prefix) {
			t.Errorf("line %d: %q, want it to start with %q", i, lines[i], prefix)
		}
	}
}

// extract writes the flattened filesystem of the tarball's image to root.
func extract(t *testing.T, p, tag, root string) {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(p, &ref)
	if err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, dst)
		case tar.TypeReg:
			err = writeFile(dst, tr, os.FileMode(h.Mode).Perm())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(p string, r io.Reader, perm os.FileMode) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
