package vmtest

import (
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// image is the initramfs being assembled: the kernel unpacks it into its
// root file system. Paths are absolute, without the leading slash.
type image struct {
	files map[string]string // path in the image -> host file
	links map[string]string // path in the image -> symlink target
	data  map[string][]byte // path in the image -> literal content (executable)
	dirs  map[string]bool
}

func newImage() *image {
	return &image{
		files: map[string]string{},
		links: map[string]string{},
		data:  map[string][]byte{},
		dirs:  map[string]bool{},
	}
}

func (im *image) parents(p string) {
	for d := path.Dir(p); d != "." && d != "/" && d != ""; d = path.Dir(d) {
		im.dirs[d] = true
	}
}

func clean(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }

func (im *image) dir(p string) { p = clean(p); im.dirs[p] = true; im.parents(p) }

func (im *image) file(p, host string) { p = clean(p); im.files[p] = host; im.parents(p) }

func (im *image) link(p, target string) { p = clean(p); im.links[p] = target; im.parents(p) }

func (im *image) bytes(p string, b []byte) { p = clean(p); im.data[p] = b; im.parents(p) }

// writeTo writes the image as a "newc" cpio archive, the format the
// kernel's initramfs unpacker reads. Directories come first so that every
// entry's parent exists when the kernel creates it.
func (im *image) writeTo(w io.Writer) error {
	cw := &cpioWriter{w: w}
	dirs := make([]string, 0, len(im.dirs))
	for d := range im.dirs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs) // a parent sorts before its children
	for _, d := range dirs {
		if err := cw.entry(d, 0o040755, nil); err != nil {
			return err
		}
	}
	for _, p := range sortedKeys(im.links) {
		if err := cw.entry(p, 0o120777, []byte(im.links[p])); err != nil {
			return err
		}
	}
	for _, p := range sortedKeys(im.data) {
		if err := cw.entry(p, 0o100755, im.data[p]); err != nil {
			return err
		}
	}
	for _, p := range sortedKeys(im.files) {
		b, err := os.ReadFile(im.files[p])
		if err != nil {
			return err
		}
		if err := cw.entry(p, 0o100755, b); err != nil {
			return err
		}
	}
	return cw.entry("TRAILER!!!", 0, nil)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

type cpioWriter struct {
	w   io.Writer
	ino int
	n   int64
}

func (c *cpioWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return err
}

func (c *cpioWriter) pad() error {
	if r := c.n % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}

func (c *cpioWriter) entry(name string, mode uint32, body []byte) error {
	c.ino++
	nlink := 1
	if mode&0o040000 != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(body), 0, 0, 0, 0, len(name)+1, 0)
	if err := c.write([]byte(hdr + name + "\x00")); err != nil {
		return err
	}
	if err := c.pad(); err != nil {
		return err
	}
	if err := c.write(body); err != nil {
		return err
	}
	return c.pad()
}
