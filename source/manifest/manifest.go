package manifest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
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
// Config.MaxFileBytes says otherwise: five times a file of 10k Services
// with an EndpointSlice each (3.3 MB, whose objects hold 14 MB once
// decoded, after 360 MB of allocations on the way), so that a runaway
// generator or a planted file cannot make the proxy's memory balloon.
const DefaultMaxFileBytes = 16 << 20

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
// content, so what is programmed stays as it was. Symlinks are followed
// only within the folder, and a ConfigMap or Secret mount's updates are
// followed; what is not read is logged (see the package documentation).
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
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
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
// path, a broken file, or a file named that is not read, such as a symlink
// leading out of its folder): there is no last good state to keep yet.
func (s *Source) Run(ctx context.Context, h source.Handler) error {
	info, err := os.Stat(s.path)
	if err != nil {
		return fileError(s.path, err)
	}
	if err := s.checkObjects(); err != nil {
		return err
	}
	refused, err := newFilesRefused(s.cfg.Registerer, s.cfg.MetricsNamespace)
	if err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching manifests: %w", err)
	}
	defer w.Close()
	st := newFileState(info.IsDir(), s.cfg.Logger, refused)
	// Watch before the first read so that no change slips between them.
	// The folder is watched even for a single file, because editors
	// replace files by renaming and a ConfigMap or Secret mount swaps its
	// "..data" symlink, not the file.
	dir := s.path
	if !st.isDir {
		dir = filepath.Dir(s.path)
	}
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watching %s: %w", dir, err)
	}
	if err := st.reload(s, true); err != nil {
		return err
	}
	st.watchTargets(w, dir)
	current := st.merged(s.cfg.Logger)
	if len(current) == 0 {
		s.cfg.Logger.Info("Manifests hold no Service, EndpointSlice or Node", "path", s.path)
	}
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
			if !st.concerns(s.path, ev.Name) {
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
			if err := st.reload(s, false); err != nil {
				s.cfg.Logger.Error(err, "Failed to re-read manifests; keeping their last good content", "path", s.path)
				if s.cfg.OnError != nil {
					s.cfg.OnError(err)
				}
			}
			st.watchTargets(w, dir)
			next := st.merged(s.cfg.Logger)
			s.logChange(current, next, diffObjects(h, current, next))
			current = next
		}
	}
}

// logChange says what a re-read changed, once per change, and says so
// louder when nothing is left: every rule of the manifests goes, which an
// emptied folder may mean but a mistake may too.
func (s *Source) logChange(old, new map[objectKey]runtime.Object, c changeCount) {
	switch {
	case len(new) == 0 && len(old) > 0:
		s.cfg.Logger.Info("Manifests hold no Service, EndpointSlice or Node any more: removing every one they served", "path", s.path, "removed", c.removed)
	case c != changeCount{}:
		s.cfg.Logger.Info("Manifests changed", "path", s.path, "added", c.added, "updated", c.updated, "removed", c.removed)
	}
}

// fileState is the last good content of every manifest file, and what the
// last read found about the files it did not read.
type fileState struct {
	isDir bool
	files map[string][]runtime.Object
	// docs are the documents of each file, by their bytes, for decoding
	// only what changed.
	docs map[string]map[docKey][]runtime.Object
	// root is the folder files must resolve into; targets are the files
	// read, symlinks resolved; both as of the last read.
	root    string
	targets map[string]bool
	// problems are the files not read or kept at their last good
	// content, by path, as of the last read: a problem is logged and
	// counted when it first appears or changes, not at every read.
	problems map[string]problem
	watched  map[string]bool
	log      logr.Logger
	refused  *prometheus.CounterVec
}

// problem is why a file was not read: ignored (logged as such), or an
// error (logged with the other errors of the read).
type problem struct {
	ignored
	isErr bool
}

func newFileState(isDir bool, log logr.Logger, refused *prometheus.CounterVec) *fileState {
	return &fileState{
		isDir:   isDir,
		files:   map[string][]runtime.Object{},
		docs:    map[string]map[docKey][]runtime.Object{},
		watched: map[string]bool{},
		log:     log,
		refused: refused,
	}
}

// concerns says whether a file event at name may change what is read from
// path: anything in the folder of a folder source; for a single file, the
// file itself, or a change in its folder that makes it resolve elsewhere
// (a ConfigMap mount's swapped "..data"); and a write to a file a symlink
// led to.
func (st *fileState) concerns(path, name string) bool {
	name = filepath.Clean(name)
	switch {
	case st.isDir && filepath.Dir(name) == path, name == path, st.targets[name]:
		return true
	case !st.isDir && filepath.Dir(name) == filepath.Dir(path):
		target, _ := filepath.EvalSymlinks(path)
		return !st.targets[target]
	}
	return false
}

// watchTargets watches the folders of the files read through symlinks
// (besides dir, the folder watched from the start), so that an edit of a
// target is seen, and stops watching those no longer needed.
func (st *fileState) watchTargets(w *fsnotify.Watcher, dir string) {
	want := map[string]bool{}
	for t := range st.targets {
		// The watched folder is not watched again by its resolved name:
		// inotify would merge the two watches under the second name.
		if d := filepath.Dir(t); d != st.root {
			want[d] = true
		}
	}
	for d := range st.watched {
		if !want[d] {
			// A ConfigMap's old timestamped folder is gone, and its
			// watch with it: nothing to report.
			_ = w.Remove(d)
			delete(st.watched, d)
		}
	}
	for d := range want {
		if st.watched[d] {
			continue
		}
		if err := w.Add(d); err != nil {
			st.log.Error(err, "Cannot watch the folder of a manifest symlink's target; its edits are seen only when the folder watched changes", "folder", d, "watched", dir)
			continue
		}
		st.watched[d] = true
	}
}

// reload re-reads every file. A file that fails keeps its previous content
// (none if it never decoded); a file that is gone or ignored is dropped.
// The errors of all failing files are returned joined. On the first read a
// single file that is ignored is an error too.
func (st *fileState) reload(s *Source, first bool) error {
	root, err := s.tree(st.isDir)
	if err != nil {
		return err
	}
	entries, err := s.list(st.isDir, root)
	if err != nil {
		return err
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return fileError(root, err)
	}
	defer r.Close()
	st.root, st.targets = root, map[string]bool{}
	var errs []error
	problems := map[string]problem{}
	seen := map[string]bool{}
	for _, en := range entries {
		if en.ignored != nil {
			if first && !st.isDir {
				st.report(map[string]problem{en.path: {ignored: *en.ignored, isErr: true}})
				return &Error{Path: en.path, Err: errors.New(en.ignored.msg)}
			}
			problems[en.path] = problem{ignored: *en.ignored}
			continue
		}
		seen[en.path] = true
		st.targets[en.target] = true
		data, err := read(r, en, s.cfg.MaxFileBytes)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				delete(seen, en.path)
				continue
			}
			problems[en.path] = problem{ignored: ignored{reasonOf(err), err.Error()}, isErr: true}
			errs = append(errs, err)
			continue
		}
		objs, docs, err := s.decoder.decode(en.path, data, st.docs[en.path])
		if err != nil {
			problems[en.path] = problem{ignored: ignored{reasonDecode, err.Error()}, isErr: true}
			errs = append(errs, err)
			continue
		}
		st.files[en.path], st.docs[en.path] = objs, docs
	}
	for p := range st.files {
		if !seen[p] {
			delete(st.files, p)
			delete(st.docs, p)
		}
	}
	st.report(problems)
	return errors.Join(errs...)
}

// report logs the files newly ignored and counts every new problem; the
// errors are logged by the caller.
func (st *fileState) report(problems map[string]problem) {
	paths := slices.Sorted(maps.Keys(problems))
	for _, p := range paths {
		pr := problems[p]
		if old, ok := st.problems[p]; ok && old == pr {
			continue
		}
		st.refused.WithLabelValues(pr.reason).Inc()
		if !pr.isErr {
			st.log.Info("Manifest file ignored", "path", p, "reason", pr.msg)
		}
	}
	st.problems = problems
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

// changeCount counts the objects a diff added, updated and removed.
type changeCount struct {
	added, updated, removed int
}

// diffObjects hands h what changed from old to new, in a stable order.
func diffObjects(h source.Handler, old, new map[objectKey]runtime.Object) changeCount {
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
	var c changeCount
	for _, k := range keys {
		o, n := old[k], new[k]
		// An object of a document that did not change is the very
		// object delivered before.
		if o != nil && n != nil && (o == n || equality.Semantic.DeepEqual(o, n)) {
			continue
		}
		source.Deliver(h, o, n)
		switch {
		case o == nil:
			c.added++
		case n == nil:
			c.removed++
		default:
			c.updated++
		}
	}
	return c
}
