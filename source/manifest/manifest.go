package manifest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/source"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
)

// DefaultDebounce is how long a Source waits after the last file event
// before re-reading.
const DefaultDebounce = 200 * time.Millisecond

// DefaultMaxFileBytes is the largest manifest file a Source reads unless
// Config.MaxFileBytes says otherwise: ten times a file of 10k Services and
// their EndpointSlices, and far below what decoding it would cost in memory
// at the API server's own limit per object (about 1.5 MiB) times a large
// cluster.
const DefaultMaxFileBytes = 64 << 20

// Config configures a Source. The zero value is usable.
type Config struct {
	// Debounce is how long to wait after the last file change before
	// re-reading, so that an editor's burst of writes is read once. Zero
	// means DefaultDebounce.
	Debounce time.Duration
	// OnError, if set, is called with the error (an *Error, or
	// several joined) each time a re-read fails. The failing files keep
	// their last good content meanwhile.
	OnError func(error)
	// Logger is where the source logs; the zero value discards.
	Logger logr.Logger
	// Clock times the debounce; nil means the real clock.
	Clock clock.Clock
	// MaxFileBytes is the largest manifest file read; a larger one is
	// refused (logged, counted, and kept at its last good content, as a
	// file that fails to decode is). Zero means DefaultMaxFileBytes.
	MaxFileBytes int64
	// Registerer receives the source's metrics (see the package
	// documentation); nil registers none.
	Registerer prometheus.Registerer
	// MetricsNamespace prefixes the metric names; "" means "proxykit".
	MetricsNamespace string
}

// Source serves the Services, EndpointSlices and Nodes of a YAML or JSON
// file, or of every *.yaml, *.yml and *.json file directly in a folder (see
// Decode for the format, and for the API server defaults it applies), so
// that a proxy runs without a cluster. It re-reads them when they change and
// hands the difference to the handler as adds, updates and deletes. Only
// the documents whose bytes changed are decoded again (one edit in a file
// of 10k services: 33 ms instead of 0.66 s here). A file that fails to
// decode is reported with its path and line and keeps its last good
// content, so what is programmed stays as it was.
type Source struct {
	path    string
	cfg     Config
	decoder *decoder
}

// New returns a source of the manifests at path, a file or a folder.
func New(path string, cfg Config) *Source {
	if cfg.Debounce <= 0 {
		cfg.Debounce = DefaultDebounce
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Source{path: filepath.Clean(path), cfg: cfg, decoder: newDecoder()}
}

// fileError reports err, met reading path, without the operation and the
// path an *fs.PathError repeats ("x.yaml: no such file or directory").
func fileError(path string, err error) *Error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		err = pe.Err
	}
	return &Error{Path: path, Err: err}
}

// String describes the source as "manifests PATH".
func (s *Source) String() string { return "manifests " + s.path }

// Run reads the manifests, delivers them, calls h.Synced and then follows
// changes until ctx is done. It fails if the first read fails (a missing
// path or a broken file): there is no last good state to keep yet.
func (s *Source) Run(ctx context.Context, h source.Handler) error {
	info, err := os.Stat(s.path)
	if err != nil {
		return fileError(s.path, err)
	}
	if err := s.checkObjects(); err != nil {
		return err
	}
	dir := s.path
	if !info.IsDir() {
		dir = filepath.Dir(s.path)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching manifests: %w", err)
	}
	defer w.Close()
	// Watch before the first read so that no change slips between them.
	// The folder is watched even for a single file, because editors and
	// ConfigMap mounts replace files by renaming.
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watching %s: %w", dir, err)
	}

	st := fileState{files: map[string][]runtime.Object{}, docs: map[string]map[docKey][]runtime.Object{}, isDir: info.IsDir()}
	if err := st.reload(s); err != nil {
		return err
	}
	current := st.merged(s.cfg.Logger)
	diffObjects(h, nil, current)
	h.Synced()

	var debounce clock.Timer
	var fire <-chan time.Time
	defer func() {
		if debounce != nil {
			debounce.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if !st.isDir && filepath.Clean(ev.Name) != s.path {
				continue
			}
			if debounce != nil {
				debounce.Stop()
			}
			debounce = s.cfg.Clock.NewTimer(s.cfg.Debounce)
			fire = debounce.C()
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.cfg.Logger.Error(err, "Manifest watch error", "path", s.path)
		case <-fire:
			fire = nil
			if err := st.reload(s); err != nil {
				s.cfg.Logger.Error(err, "Failed to re-read manifests; keeping their last good content", "path", s.path)
				if s.cfg.OnError != nil {
					s.cfg.OnError(err)
				}
			}
			next := st.merged(s.cfg.Logger)
			diffObjects(h, current, next)
			current = next
		}
	}
}

// fileState is the last good content of every manifest file.
type fileState struct {
	isDir bool
	files map[string][]runtime.Object
	// docs are the documents of each file, by their bytes, for decoding
	// only what changed.
	docs map[string]map[docKey][]runtime.Object
}

// reload re-reads every file. A file that fails keeps its previous content
// (none if it never decoded); a file that is gone is dropped. The errors of
// all failing files are returned joined.
func (st *fileState) reload(s *Source) error {
	paths, err := s.files(st.isDir)
	if err != nil {
		return err
	}
	var errs []error
	seen := map[string]bool{}
	for _, p := range paths {
		seen[p] = true
		data, err := os.ReadFile(p)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fileError(p, err))
			} else {
				delete(st.files, p)
				delete(st.docs, p)
			}
			continue
		}
		objs, docs, err := s.decoder.decode(p, data, st.docs[p])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st.files[p], st.docs[p] = objs, docs
	}
	for p := range st.files {
		if !seen[p] {
			delete(st.files, p)
			delete(st.docs, p)
		}
	}
	return errors.Join(errs...)
}

// files lists the manifest files: the path itself, or the regular files
// (symlinks followed) with a manifest extension directly in the folder,
// sorted; hidden files are ignored.
func (s *Source) files(isDir bool) ([]string, error) {
	if !isDir {
		return []string{s.path}, nil
	}
	entries, err := os.ReadDir(s.path)
	if err != nil {
		return nil, fileError(s.path, err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		switch strings.ToLower(filepath.Ext(name)) {
		case ".yaml", ".yml", ".json":
		default:
			continue
		}
		p := filepath.Join(s.path, name)
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// objectKey identifies a manifest object.
type objectKey struct {
	kind            int
	namespace, name string
}

// Kind ranks: on add, Nodes and Services reach the handler before the
// EndpointSlices that refer to them.
const (
	kindNode = iota
	kindService
	kindEndpointSlice
	kindServiceCIDR
)

func keyOf(o runtime.Object) objectKey {
	k := objectKey{}
	switch o.(type) {
	case *v1.Node:
		k.kind = kindNode
	case *v1.Service:
		k.kind = kindService
	case *discovery.EndpointSlice:
		k.kind = kindEndpointSlice
	case *networking.ServiceCIDR:
		k.kind = kindServiceCIDR
	}
	if a, err := meta.Accessor(o); err == nil {
		k.namespace, k.name = a.GetNamespace(), a.GetName()
	}
	return k
}

func (k objectKey) String() string {
	kinds := [...]string{"Node", "Service", "EndpointSlice", "ServiceCIDR"}
	if k.namespace == "" {
		return kinds[k.kind] + " " + k.name
	}
	return kinds[k.kind] + " " + k.namespace + "/" + k.name
}

// merged returns every object by key. When several files (or documents)
// define one object, the first in path and document order wins, so the
// outcome never depends on read order.
func (st *fileState) merged(log logr.Logger) map[objectKey]runtime.Object {
	paths := make([]string, 0, len(st.files))
	for p := range st.files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	out := map[objectKey]runtime.Object{}
	from := map[objectKey]string{}
	for _, p := range paths {
		for _, o := range st.files[p] {
			k := keyOf(o)
			if first, dup := from[k]; dup {
				log.Info("Duplicate manifest object ignored", "object", k.String(), "path", p, "keptFrom", first)
				continue
			}
			out[k], from[k] = o, p
		}
	}
	return out
}

// diffObjects hands h what changed from old to new, in a stable order.
func diffObjects(h source.Handler, old, new map[objectKey]runtime.Object) {
	keys := make([]objectKey, 0, len(old)+len(new))
	for k := range old {
		keys = append(keys, k)
	}
	for k := range new {
		if _, ok := old[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b objectKey) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
	for _, k := range keys {
		o, n := old[k], new[k]
		// An object of a document that did not change is the very
		// object delivered before.
		if o != nil && n != nil && (o == n || equality.Semantic.DeepEqual(o, n)) {
			continue
		}
		source.Deliver(h, o, n)
	}
}
