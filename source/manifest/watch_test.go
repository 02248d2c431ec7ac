package manifest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// logLines records what a logger writes at the default level (funcr's
// verbosity 0), one funcr line per entry.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func newLogLines(t *testing.T) (*logLines, logr.Logger) {
	l := &logLines{}
	return l, funcr.New(func(prefix, args string) {
		t.Log(args)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

// count returns how many lines have message msg and contain every one of
// parts.
func (l *logLines) count(msg string, parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range l.lines {
		if !strings.Contains(line, fmt.Sprintf("%q=%q", "msg", msg)) {
			continue
		}
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		n++
	}
	return n
}

// wait waits until a line has message msg and every one of parts.
func (l *logLines) wait(t *testing.T, msg string, parts ...string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("log %q with %q", msg, parts), func() bool { return l.count(msg, parts...) > 0 })
}

// refused returns the files-refused counter's values by reason, those not
// zero.
func refused(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	return counterBy(t, reg, "proxykit_source_files_refused_total", "reason")
}

// counterBy returns the values of the counter name that are not zero, by
// their label; a series that names its source must name "manifests".
func counterBy(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if s, ok := labels["source"]; ok && s != "manifests" {
				t.Errorf("%s: source label %q", name, s)
			}
			if v := m.GetCounter().GetValue(); v != 0 {
				out[labels[label]] = v
			}
		}
	}
	return out
}

// configMapVolume lays files out as the kubelet's atomic writer does in a
// ConfigMap or Secret volume: the files in a hidden timestamped folder,
// "..data" a symlink to it, and each visible name a symlink through
// "..data" (svc.yaml -> ..data/svc.yaml). An update writes a new
// timestamped folder, points a new "..data_tmp" symlink at it and renames
// that over "..data" (the one atomic step), then adds the visible links of
// new names, removes those of names gone, and removes the old folder.
type configMapVolume struct {
	dir string
	gen int
}

func (v *configMapVolume) write(t *testing.T, files map[string]string) {
	t.Helper()
	v.gen++
	ts, err := os.MkdirTemp(v.dir, fmt.Sprintf("..2026_12_07_20_00_%02d.", v.gen))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		writeFile(t, filepath.Join(ts, name), data)
	}
	data := filepath.Join(v.dir, "..data")
	old, _ := os.Readlink(data)
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, data); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if _, err := os.Lstat(filepath.Join(v.dir, name)); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(v.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, keep := files[e.Name()]; !keep && !strings.HasPrefix(e.Name(), "..") {
			if err := os.Remove(filepath.Join(v.dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

func newConfigMapVolume(t *testing.T) *configMapVolume {
	dir := filepath.Join(t.TempDir(), "volume")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &configMapVolume{dir: dir}
}

var svcPort81 = strings.Replace(svcYAML, "port: 80", "port: 81", 1)

// TestConfigMapFileSwap: --manifests naming one file of a ConfigMap mount
// follows the swap of "..data", which never touches the file's own name.
func TestConfigMapFileSwap(t *testing.T) {
	v := newConfigMapVolume(t)
	v.write(t, map[string]string{"svc.yaml": svcYAML, "node.yaml": nodeYAML})
	logs, log := newLogLines(t)
	path := filepath.Join(v.dir, "svc.yaml")
	h := newRecordingHandler()
	runSource(t, New(path, Config{Debounce: 20 * time.Millisecond, Logger: log}), h)
	<-h.synced
	waitEvents(t, h, []string{"add Service demo/web"})

	v.write(t, map[string]string{"svc.yaml": svcPort81, "node.yaml": nodeYAML})
	waitEvents(t, h, []string{"update Service demo/web"})
	logs.wait(t, "Manifests changed", path, `"updated"=1`)

	// A second swap, after the first one's folder is gone.
	v.write(t, map[string]string{"svc.yaml": svcYAML + "---\n" + sliceYAML, "node.yaml": nodeYAML})
	waitEvents(t, h, []string{"update Service demo/web", "add EndpointSlice demo/web-1"})
	if n := logs.count("Manifest file ignored"); n != 0 {
		t.Errorf("%d files said to be ignored, want none", n)
	}
}

// TestConfigMapFolderSwap: a folder that is a ConfigMap mount follows its
// swaps, keys added and removed, and says nothing of its hidden "..data"
// and timestamped folders.
func TestConfigMapFolderSwap(t *testing.T) {
	v := newConfigMapVolume(t)
	v.write(t, map[string]string{"a.yaml": svcYAML + "---\n" + sliceYAML, "b.yaml": nodeYAML})
	logs, log := newLogLines(t)
	h := newRecordingHandler()
	runSource(t, New(v.dir, Config{Debounce: 20 * time.Millisecond, Logger: log}), h)
	<-h.synced
	waitEvents(t, h, []string{"add Node test-node", "add Service demo/web", "add EndpointSlice demo/web-1"})

	v.write(t, map[string]string{"a.yaml": svcPort81 + "---\n" + sliceYAML, "c.json": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"api","namespace":"demo"},"spec":{"ports":[{"port":80}]}}`})
	waitEvents(t, h, []string{"delete Node test-node", "add Service demo/api", "update Service demo/web"})
	logs.wait(t, "Manifests changed", v.dir, `"added"=1`, `"updated"=1`, `"removed"=1`)
	if n := logs.count("Manifest file ignored"); n != 0 {
		t.Errorf("%d files said to be ignored, want none", n)
	}
}

// TestSymlinkTargetEdited: a file whose symlink leads elsewhere in the
// folder's tree is re-read when its target is edited in place, whether the
// folder or the symlink itself is the source.
func TestSymlinkTargetEdited(t *testing.T) {
	for _, tc := range []struct {
		name string
		path func(dir string) string
	}{
		{"folder", func(dir string) string { return dir }},
		{"file", func(dir string) string { return filepath.Join(dir, "a.yaml") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "store"), 0o755); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(dir, "store", "web.yaml")
			writeFile(t, target, svcYAML)
			if err := os.Symlink(filepath.Join("store", "web.yaml"), filepath.Join(dir, "a.yaml")); err != nil {
				t.Fatal(err)
			}
			logs, log := newLogLines(t)
			path := tc.path(dir)
			h := newRecordingHandler()
			runSource(t, New(path, Config{Debounce: 20 * time.Millisecond, Logger: log}), h)
			<-h.synced
			waitEvents(t, h, []string{"add Service demo/web"})

			writeFile(t, target, svcPort81)
			waitEvents(t, h, []string{"update Service demo/web"})
			logs.wait(t, "Manifests changed", path, `"updated"=1`)
		})
	}
}

// TestEmptiedFolder: a folder emptied removes every object it served, and
// says so at the default level.
func TestEmptiedFolder(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), svcYAML+"---\n"+sliceYAML)
	logs, log := newLogLines(t)
	h := newRecordingHandler()
	runSource(t, New(dir, Config{Debounce: 20 * time.Millisecond, Logger: log}), h)
	<-h.synced
	waitEvents(t, h, []string{"add Service demo/web", "add EndpointSlice demo/web-1"})

	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, h, []string{"delete Service demo/web", "delete EndpointSlice demo/web-1"})
	logs.wait(t, "Manifests hold no Service, EndpointSlice or Node any more: removing every one they served", dir, `"removed"=2`)
}

// TestIgnoredFiles: each file a folder source does not read is logged once
// at the default level with the reason and counted, and the rest is
// served.
func TestIgnoredFiles(t *testing.T) {
	for _, tc := range []struct {
		name, entry, reason, msg string
		setup                    func(t *testing.T, dir, outside string)
	}{
		{"symlink loop", "loop.yaml", reasonSymlinkLoop, "symlink loop", func(t *testing.T, dir, _ string) {
			symlink(t, "loop.yaml", filepath.Join(dir, "loop.yaml"))
		}},
		{"dangling symlink", "gone.yaml", reasonDanglingSymlink, "dangling symlink to nowhere.yaml", func(t *testing.T, dir, _ string) {
			symlink(t, "nowhere.yaml", filepath.Join(dir, "gone.yaml"))
		}},
		{"sub-folder", "sub", reasonDirectory, "a sub-folder", func(t *testing.T, dir, _ string) {
			if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "sub", "node.yaml"), nodeYAML)
		}},
		{"relative symlink out of the folder", "out.yaml", reasonOutside, "outside", func(t *testing.T, dir, outside string) {
			symlink(t, filepath.Join("..", filepath.Base(outside), "node.yaml"), filepath.Join(dir, "out.yaml"))
		}},
		{"absolute symlink out of the folder", "out.yaml", reasonOutside, "outside", func(t *testing.T, dir, outside string) {
			symlink(t, filepath.Join(outside, "node.yaml"), filepath.Join(dir, "out.yaml"))
		}},
		{"FIFO", "pipe.yaml", reasonNotRegular, "not a regular file", func(t *testing.T, dir, _ string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"other extension", "node.txt", reasonExtension, "not a .yaml, .yml or .json file", func(t *testing.T, dir, _ string) {
			writeFile(t, filepath.Join(dir, "node.txt"), nodeYAML)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir, outside := filepath.Join(base, "manifests"), filepath.Join(base, "elsewhere")
			for _, d := range []string{dir, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			writeFile(t, filepath.Join(outside, "node.yaml"), nodeYAML)
			writeFile(t, filepath.Join(dir, "web.yaml"), svcYAML)
			tc.setup(t, dir, outside)
			logs, log := newLogLines(t)
			reg := prometheus.NewPedanticRegistry()
			h := newRecordingHandler()
			runSource(t, New(dir, Config{Debounce: 20 * time.Millisecond, Logger: log, Registerer: reg}), h)
			<-h.synced
			waitEvents(t, h, []string{"add Service demo/web"})
			entry := fmt.Sprintf("%q=%q", "path", filepath.Join(dir, tc.entry))
			logs.wait(t, "Manifest file ignored", entry, tc.msg)

			// Another change reads the folder again: the ignored file
			// is neither logged nor counted again.
			writeFile(t, filepath.Join(dir, "web.yaml"), svcPort81)
			waitEvents(t, h, []string{"update Service demo/web"})
			logs.wait(t, "Manifests changed")
			if n := logs.count("Manifest file ignored", entry); n != 1 {
				t.Errorf("ignored %d times, want once", n)
			}
			if diff := cmp.Diff(map[string]float64{tc.reason: 1}, refused(t, reg)); diff != "" {
				t.Errorf("files refused (-want +got):\n%s", diff)
			}
		})
	}
}

// canceled is a context already done: Run returns after its first read.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestOversizedFile: a file over MaxFileBytes is refused at start; one
// that grows over it later keeps its last good content, as a broken file
// does, and is reported and counted.
func TestOversizedFile(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "b.yaml")
	writeFile(t, filepath.Join(dir, "a.yaml"), svcYAML)
	writeFile(t, big, nodeYAML+"#"+strings.Repeat("x", 2048)+"\n")
	err := New(dir, Config{MaxFileBytes: 2048}).Run(canceled(), newRecordingHandler())
	var me *Error
	if !errors.As(err, &me) || me.Path != big || !errors.Is(err, ErrFileTooLarge) {
		t.Fatalf("Run = %v, want %s too large", err, big)
	}

	writeFile(t, big, nodeYAML)
	logs, log := newLogLines(t)
	reg := prometheus.NewPedanticRegistry()
	errs := make(chan error, 10)
	h := newRecordingHandler()
	runSource(t, New(dir, Config{Debounce: 20 * time.Millisecond, Logger: log, Registerer: reg, MaxFileBytes: 2048,
		OnError: func(err error) { errs <- err }}), h)
	<-h.synced
	waitEvents(t, h, []string{"add Node test-node", "add Service demo/web"})

	writeFile(t, big, strings.Replace(nodeYAML, "192.168.0.2", "192.168.0.3", 1)+"#"+strings.Repeat("x", 2048)+"\n")
	writeFile(t, filepath.Join(dir, "a.yaml"), svcPort81)
	waitEvents(t, h, []string{"update Service demo/web"})
	if err := <-errs; !errors.Is(err, ErrFileTooLarge) || !strings.Contains(err.Error(), big) {
		t.Errorf("OnError(%v), want %s too large", err, big)
	}
	logs.wait(t, "Failed to re-read manifests; keeping their last good content", "more than the 2048 bytes a file may have")
	if diff := cmp.Diff(map[string]float64{reasonTooLarge: 1}, refused(t, reg)); diff != "" {
		t.Errorf("files refused (-want +got):\n%s", diff)
	}
}

// TestSourceFileRefused: a single file named that is not read is an error
// at start, naming why.
func TestSourceFileRefused(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "manifests"), filepath.Join(base, "elsewhere")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(outside, "svc.yaml"), svcYAML)
	symlink(t, filepath.Join("..", "elsewhere", "svc.yaml"), filepath.Join(dir, "out.yaml"))
	symlink(t, "loop.yaml", filepath.Join(dir, "loop.yaml"))
	for _, tc := range []struct{ name, want string }{
		{"out.yaml", "outside " + dir},
		{"loop.yaml", "too many levels of symbolic links"},
	} {
		path := filepath.Join(dir, tc.name)
		err := New(path, Config{}).Run(canceled(), newRecordingHandler())
		var me *Error
		if !errors.As(err, &me) || me.Path != path || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%s) = %v, want an *Error containing %q", tc.name, err, tc.want)
		}
	}
}
