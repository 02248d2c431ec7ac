package cluster

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// vmImage is the file tree of a node VM's initramfs: paths in the VM
// mapped to where their content comes from. Parents are implied.
type vmImage map[string]vmEntry

// vmEntry is one file of a vmImage: a host file's content, bytes, a
// symbolic link or a directory.
type vmEntry struct {
	host   string
	data   []byte
	link   string
	mode   fs.FileMode // permission bits; zero: the host file's, or 0644/0755
	isDir  bool
	isData bool
}

func (im vmImage) file(vm, host string) { im[vm] = vmEntry{host: host} }
func (im vmImage) bytes(vm string, b []byte, mode fs.FileMode) {
	im[vm] = vmEntry{data: b, isData: true, mode: mode}
}
func (im vmImage) symlink(vm, target string) { im[vm] = vmEntry{link: target} }
func (im vmImage) dir(vm string)             { im[vm] = vmEntry{isDir: true} }

// program adds the host's program (found on PATH unless absolute) at
// its host path, and the shared libraries it loads.
func (im vmImage) program(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("cluster: VM: %s is not on PATH: %w", name, err)
	}
	if p, err = filepath.Abs(p); err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("cluster: VM: %w", err)
	}
	im.file(p, real)
	return p, im.libraries(real)
}

var lddLine = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x`)

// libraries adds the shared libraries (and the loader) ldd names for file.
func (im vmImage) libraries(file string) error {
	out, err := exec.Command("ldd", file).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") || strings.Contains(string(out), "statically linked") {
			return nil
		}
		return fmt.Errorf("cluster: VM: ldd %s: %w: %s", file, err, out)
	}
	for _, m := range lddLine.FindAllStringSubmatch(string(out), -1) {
		im.file(m[1], m[1])
	}
	return nil
}

// tree adds every regular file under the host directory dir at the same
// path.
func (im vmImage) tree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			im.file(p, p)
		}
		return nil
	})
}

// writeCPIO writes im as an uncompressed newc archive (what the kernel
// unpacks as an initramfs; uncompressed because decompressing under TCG
// costs more than loading), parents before children.
func (im vmImage) writeCPIO(w io.Writer) error {
	all := map[string]vmEntry{}
	for p, e := range im {
		all[p] = e
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := im[d]; !ok {
				all[d] = vmEntry{isDir: true}
			}
		}
	}
	names := make([]string, 0, len(all))
	for p := range all {
		names = append(names, p)
	}
	slices.Sort(names)
	bw := bufio.NewWriterSize(w, 1<<20)
	for ino, name := range names {
		if err := writeCPIOEntry(bw, ino+1, name, all[name]); err != nil {
			return err
		}
	}
	if err := cpioHeader(bw, 0, 0, 0, "TRAILER!!!"); err != nil {
		return err
	}
	return bw.Flush()
}

const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
)

func writeCPIOEntry(w *bufio.Writer, ino int, name string, e vmEntry) error {
	rel := strings.TrimPrefix(name, "/")
	switch {
	case e.isDir:
		return cpioHeader(w, ino, cpioDir|0o755, 0, rel)
	case e.link != "":
		if err := cpioHeader(w, ino, cpioSymlink|0o777, len(e.link), rel); err != nil {
			return err
		}
		_, err := w.WriteString(e.link)
		pad(w, len(e.link))
		return err
	case e.isData:
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		if err := cpioHeader(w, ino, cpioFile|uint32(mode.Perm()), len(e.data), rel); err != nil {
			return err
		}
		_, err := w.Write(e.data)
		pad(w, len(e.data))
		return err
	}
	f, err := os.Open(e.host)
	if err != nil {
		return fmt.Errorf("cluster: VM image: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cluster: VM image: %w", err)
	}
	mode := e.mode
	if mode == 0 {
		mode = st.Mode().Perm()
	}
	if err := cpioHeader(w, ino, cpioFile|uint32(mode), int(st.Size()), rel); err != nil {
		return err
	}
	n, err := io.Copy(w, f)
	if err != nil {
		return fmt.Errorf("cluster: VM image: %s: %w", e.host, err)
	}
	if n != st.Size() {
		return fmt.Errorf("cluster: VM image: %s changed size while copied", e.host)
	}
	pad(w, int(n))
	return nil
}

// cpioHeader writes a newc header and the name, padded to four bytes.
func cpioHeader(w *bufio.Writer, ino int, mode uint32, size int, name string) error {
	_, err := fmt.Fprintf(w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	if err != nil {
		return err
	}
	w.WriteString(name)
	w.WriteByte(0)
	pad(w, 110+len(name)+1)
	return nil
}

func pad(w *bufio.Writer, n int) {
	for ; n%4 != 0; n++ {
		w.WriteByte(0)
	}
}
