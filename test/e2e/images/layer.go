package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"
)

// file is one entry of a layer: a copy of a host file, literal content,
// a symlink or a directory.
type file struct {
	path string      // absolute path in the image
	mode os.FileMode // permission bits (and os.ModeDir, os.ModeSymlink)
	src  string      // host file to copy (regular files)
	data []byte      // literal content (regular files without src)
	link string      // symlink target
}

func directory(p string, perm os.FileMode) file { return file{path: p, mode: os.ModeDir | perm} }
func symlink(p, target string) file             { return file{path: p, mode: os.ModeSymlink | 0o777, link: target} }
func literal(p, content string) file            { return file{path: p, mode: 0o644, data: []byte(content)} }
func copyOf(p, src string, perm os.FileMode) file {
	return file{path: p, mode: perm, src: src}
}

// layer is an uncompressed layer tarball, built once in memory: its
// sha256 (the diffID) keys the image cache before anything is
// compressed.
type layer struct {
	tar    []byte
	diffID string
}

// epoch is every entry's mtime, so that the same inputs give the same
// layer digest.
var epoch = time.Unix(0, 0)

// newLayer tars files, sorted, with every parent directory (0755 unless
// listed), owned by root.
func newLayer(files []file) (*layer, error) {
	byPath := map[string]file{}
	for _, f := range files {
		byPath[path.Clean(f.path)] = f
		for d := path.Dir(f.path); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = directory(d, 0o755)
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		if err := writeEntry(tw, p, byPath[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(buf.Bytes())
	return &layer{tar: buf.Bytes(), diffID: fmt.Sprintf("sha256:%x", sum)}, nil
}

func writeEntry(tw *tar.Writer, p string, f file) error {
	hdr := &tar.Header{Name: p[1:], Mode: int64(f.mode.Perm()), ModTime: epoch}
	if f.mode&os.ModeSticky != 0 {
		hdr.Mode |= 0o1000 // tar's c_ISVTX, which os.ModeSticky is not
	}
	var body io.Reader
	switch {
	case f.mode.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
	case f.mode&os.ModeSymlink != 0:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, f.link
	case f.src != "":
		src, err := os.Open(f.src)
		if err != nil {
			return err
		}
		defer src.Close()
		st, err := src.Stat()
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Size, body = tar.TypeReg, st.Size(), src
	default:
		hdr.Typeflag, hdr.Size, body = tar.TypeReg, int64(len(f.data)), bytes.NewReader(f.data)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("layer entry %s: %w", p, err)
	}
	if body != nil {
		if _, err := io.Copy(tw, body); err != nil {
			return fmt.Errorf("layer entry %s from %s: %w", p, f.src, err)
		}
	}
	return nil
}
