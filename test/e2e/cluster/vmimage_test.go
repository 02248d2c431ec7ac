package cluster

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestVMImageCPIO checks the initramfs archive against GNU cpio, which
// reads newc as the kernel does: parents implied, modes, links, content.
func TestVMImageCPIO(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("no cpio to read the archive back")
	}
	host := t.TempDir()
	src := filepath.Join(host, "prog")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	im := vmImage{}
	im.file("/usr/bin/prog", src)
	im.bytes("/etc/k/conf", []byte("abc"), 0o600)
	im.symlink("/bin/sh", "busybox")
	im.dir("/proc")
	var buf bytes.Buffer
	if err := im.writeCPIO(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive of %d bytes: not padded to 4", buf.Len())
	}
	out := t.TempDir()
	cmd := exec.Command("cpio", "-id", "--quiet", "--no-absolute-filenames")
	cmd.Dir, cmd.Stdin = out, &buf
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -id: %v: %s", err, b)
	}
	got := map[string]string{}
	err := filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == out {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			got[rel] = "-> " + l
		case fi.IsDir():
			got[rel] = fi.Mode().String()
		default:
			b, _ := os.ReadFile(p)
			got[rel] = fi.Mode().String() + " " + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"bin": "drwxr-xr-x", "bin/sh": "-> busybox",
		"etc": "drwxr-xr-x", "etc/k": "drwxr-xr-x", "etc/k/conf": "-rw------- abc",
		"proc": "drwxr-xr-x",
		"usr":  "drwxr-xr-x", "usr/bin": "drwxr-xr-x", "usr/bin/prog": "-rwxr-x--- #!/bin/sh\necho hi\n",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("extracted tree (-want +got):\n%s", diff)
	}
}
