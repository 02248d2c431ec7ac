package manifest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrFileTooLarge is wrapped by the *Error of a manifest file larger than
// Config.MaxFileBytes.
var ErrFileTooLarge = errors.New("manifest file too large")

// Why a file is not read, the reason label of the files-refused metric.
const (
	reasonSymlinkLoop     = "symlink_loop"
	reasonDanglingSymlink = "dangling_symlink"
	reasonOutside         = "outside_folder"
	reasonDirectory       = "directory"
	reasonNotRegular      = "not_regular_file"
	reasonExtension       = "extension"
	reasonTooLarge        = "too_large"
	reasonUnreadable      = "unreadable"
	reasonDecode          = "decode_error"
)

// reasonOf is the metric's reason for an error reading a file.
func reasonOf(err error) string {
	if errors.Is(err, ErrFileTooLarge) {
		return reasonTooLarge
	}
	return reasonUnreadable
}

// ignored says why a file is not read: reason is the metric's label, msg
// the log's words.
type ignored struct {
	reason, msg string
}

// entry is one candidate manifest file.
type entry struct {
	// path is the file as the user sees it: the folder joined with the
	// name, or the file named.
	path string
	// target is the file path resolves to (symlinks followed), and rel
	// the same relative to the tree it must stay in.
	target, rel string
	// ignored is set when the file is not to be read.
	ignored *ignored
}

// tree is the folder every manifest file must resolve into: the folder
// named, or the folder of the file named, symlinks resolved.
func (s *Source) tree(isDir bool) (string, error) {
	dir := s.path
	if !isDir {
		dir = filepath.Dir(s.path)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fileError(dir, err)
	}
	return root, nil
}

// list returns the candidate files, sorted: the path itself, or every entry
// directly in the folder but the hidden ones, each with what it resolves to
// or why it is ignored.
func (s *Source) list(isDir bool, root string) ([]entry, error) {
	if !isDir {
		return []entry{resolve(s.path, root, false)}, nil
	}
	entries, err := os.ReadDir(s.path)
	if err != nil {
		return nil, fileError(s.path, err)
	}
	var out []entry
	for _, e := range entries {
		// Hidden entries are editors' temporary files and the
		// "..data" symlink and timestamped folders of a ConfigMap or
		// Secret mount, whose files the visible symlinks lead to.
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		en := resolve(filepath.Join(s.path, e.Name()), root, true)
		if en.target == "" && en.ignored == nil {
			continue // gone since the listing
		}
		out = append(out, en)
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.path, b.path) })
	return out, nil
}

// resolve follows the symlinks of path and says whether the file it leads
// to may be read: a regular file inside root (and, in a folder, with a
// manifest extension). An entry with neither target nor ignored set is a
// file that no longer exists.
func resolve(path, root string, inFolder bool) entry {
	en := entry{path: path}
	lfi, err := os.Lstat(path)
	if err != nil {
		return en
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, syscall.ELOOP):
		en.ignored = &ignored{reasonSymlinkLoop, "symlink loop"}
		return en
	case errors.Is(err, fs.ErrNotExist) && lfi.Mode()&fs.ModeSymlink != 0:
		link, _ := os.Readlink(path)
		en.ignored = &ignored{reasonDanglingSymlink, "dangling symlink to " + link}
		return en
	case err != nil:
		en.ignored = &ignored{reasonUnreadable, "cannot be read: " + fileError(path, err).Err.Error()}
		return en
	}
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		en.ignored = &ignored{reasonUnreadable, "cannot be read: " + fileError(path, err).Err.Error()}
		return en
	}
	rel, err := filepath.Rel(root, target)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		en.ignored = &ignored{reasonOutside, fmt.Sprintf("symlink leads to %s, outside %s", target, root)}
		return en
	}
	switch {
	case fi.IsDir():
		en.ignored = &ignored{reasonDirectory, "a sub-folder: only the files directly in the folder are read"}
	case !fi.Mode().IsRegular():
		en.ignored = &ignored{reasonNotRegular, "not a regular file (" + fi.Mode().Type().String() + ")"}
	case inFolder && !hasManifestExtension(path):
		en.ignored = &ignored{reasonExtension, "not a .yaml, .yml or .json file"}
	}
	en.target, en.rel = target, rel
	return en
}

func hasManifestExtension(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// read reads the file en resolved to through root, so that a symlink
// swapped since it was resolved cannot lead outside, and reads no more
// than max bytes. Opening does not block: a FIFO swapped in since would
// otherwise wait for a writer forever.
func read(root *os.Root, en entry, max int64) ([]byte, error) {
	f, err := root.OpenFile(en.rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fileError(en.path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileError(en.path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, &Error{Path: en.path, Err: fmt.Errorf("not a regular file (%s)", fi.Mode().Type())}
	}
	if fi.Size() > max {
		return nil, tooLarge(en.path, max)
	}
	// The file may grow while it is read.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fileError(en.path, err)
	}
	if int64(len(data)) > max {
		return nil, tooLarge(en.path, max)
	}
	return data, nil
}

func tooLarge(path string, max int64) *Error {
	return &Error{Path: path, Err: fmt.Errorf("%w: more than the %d bytes a file may have", ErrFileTooLarge, max)}
}

// DefaultMetricsNamespace is the metric name prefix a Config's ""
// MetricsNamespace means.
const DefaultMetricsNamespace = "proxykit"

// newFilesRefused returns the counter of refused files,
// <ns>_source_files_refused_total{reason}, registered on reg (nil registers
// none), every reason's series present from the start. Sources sharing a
// Registerer share the counter.
func newFilesRefused(reg prometheus.Registerer, ns string) (*prometheus.CounterVec, error) {
	if ns == "" {
		ns = DefaultMetricsNamespace
	}
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "source_files_refused_total",
		Help: "Manifest files a source did not read, or kept at their last good content, by reason; each counted once until what is wrong with it changes.",
	}, []string{"reason"})
	if reg != nil {
		if err := reg.Register(c); err != nil {
			are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
			if !ok {
				return nil, fmt.Errorf("registering manifest metrics: %w", err)
			}
			if c, ok = are.ExistingCollector.(*prometheus.CounterVec); !ok {
				return nil, fmt.Errorf("registering manifest metrics: %w", err)
			}
		}
	}
	for _, r := range []string{reasonSymlinkLoop, reasonDanglingSymlink, reasonOutside, reasonDirectory,
		reasonNotRegular, reasonExtension, reasonTooLarge, reasonUnreadable, reasonDecode} {
		c.WithLabelValues(r)
	}
	return c, nil
}
