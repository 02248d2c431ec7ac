package manifest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/source"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

const svcYAML = `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: demo
spec:
  clusterIP: 172.30.0.1
  clusterIPs: [172.30.0.1]
  ports:
  - name: http
    port: 80
    protocol: TCP
`

const sliceYAML = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: demo
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- name: http
  port: 8080
  protocol: TCP
endpoints:
- addresses: [10.0.0.1]
`

const nodeYAML = `apiVersion: v1
kind: Node
metadata:
  name: test-node
status:
  addresses:
  - type: InternalIP
    address: 192.168.0.2
`

// objectNames renders decoded objects as "Kind ns/name".
func objectNames(objs []runtime.Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, keyOf(o).String())
	}
	return out
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		want []string
	}{
		{"multi-document", svcYAML + "---\n" + sliceYAML + "---\n# only a comment\n---\n" + nodeYAML,
			[]string{"Service demo/web", "EndpointSlice demo/web-1", "Node test-node"}},
		{"other kinds left out", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n---\n" + svcYAML,
			[]string{"Service demo/web"}},
		{"default namespace", "apiVersion: v1\nkind: Service\nmetadata:\n  name: bare\nspec:\n  ports:\n  - port: 80\n",
			[]string{"Service default/bare"}},
		{"list", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata:\n    name: a\n  spec:\n    ports:\n    - port: 80\n- apiVersion: v1\n  kind: Node\n  metadata:\n    name: nd\n",
			[]string{"Service default/a", "Node nd"}},
		{"json stream", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"x"},"spec":{"ports":[{"port":80}]}}
{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"}}`,
			[]string{"Service x/a", "Node n"}},
		{"crlf", strings.ReplaceAll(svcYAML, "\n", "\r\n"), []string{"Service demo/web"}},
		{"service CIDR", "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata:\n  name: kubernetes\nspec:\n  cidrs: [10.96.0.0/16]\n",
			[]string{"ServiceCIDR kubernetes"}},
		{"empty", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode("f.yaml", []byte(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, objectNames(objs)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		data     string
		wantLine int
		wantMsg  string
	}{
		{"yaml syntax in second document", svcYAML + "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: [oops\n", 17, "did not find expected"},
		{"unknown field", svcYAML + "---\n" + "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  clusterIp: 1.2.3.4\n", 14, `unknown field "spec.clusterIp"`},
		{"unknown kind", "apiVersion: v1\nkind: Servic\nmetadata:\n  name: x\n", 1, "Servic"},
		{"unsupported version", "apiVersion: discovery.k8s.io/v1beta1\nkind: EndpointSlice\nmetadata:\n  name: x\naddressType: IPv4\nendpoints: []\n", 1, "use discovery.k8s.io/v1"},
		{"list item", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata:\n    name: a\n  bogus: 1\n", 1, "item 0"},
		{"json syntax", "{\"apiVersion\":\"v1\",\n\"kind\":\"Service\",,\n}", 2, "invalid character"},
		{"no kind", "metadata:\n  name: x\n", 1, "Kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode("dir/f.yaml", []byte(tc.data))
			var me *Error
			if !errors.As(err, &me) {
				t.Fatalf("error %v is not a *Error", err)
			}
			if me.Path != "dir/f.yaml" || me.Line != tc.wantLine || !strings.Contains(me.Error(), tc.wantMsg) {
				t.Errorf("error %q (line %d), want dir/f.yaml line %d containing %q", me.Error(), me.Line, tc.wantLine, tc.wantMsg)
			}
			if !strings.HasPrefix(me.Error(), fmt.Sprintf("dir/f.yaml:%d: ", tc.wantLine)) {
				t.Errorf("message %q does not start with path:line", me.Error())
			}
		})
	}
}

// recordingHandler records what a source delivers.
type recordingHandler struct {
	mu     sync.Mutex
	events []string
	synced chan struct{}
	once   sync.Once
}

func newRecordingHandler() *recordingHandler {
	return &recordingHandler{synced: make(chan struct{})}
}

func (r *recordingHandler) add(kind string, oldName, newName string, oldNil, newNil bool) {
	op := "update"
	switch {
	case oldNil:
		op = "add"
	case newNil:
		op = "delete"
	}
	name := newName
	if newNil {
		name = oldName
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, op+" "+kind+" "+name)
}

func (r *recordingHandler) OnService(old, new *v1.Service) {
	r.add("Service", nameOf(old), nameOf(new), old == nil, new == nil)
}

func (r *recordingHandler) OnEndpointSlice(old, new *discovery.EndpointSlice) {
	r.add("EndpointSlice", nameOf(old), nameOf(new), old == nil, new == nil)
}

func (r *recordingHandler) OnNode(old, new *v1.Node) {
	r.add("Node", nameOf(old), nameOf(new), old == nil, new == nil)
}

func (r *recordingHandler) Synced() { r.once.Do(func() { close(r.synced) }) }

// take returns and forgets the events so far.
func (r *recordingHandler) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

func nameOf[P interface {
	comparable
	GetNamespace() string
	GetName() string
}](o P) string {
	var none P
	if o == none {
		return ""
	}
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// waitEvents waits until the handler has recorded want (in order).
func waitEvents(t *testing.T, r *recordingHandler, want []string) {
	t.Helper()
	var got []string
	for range 500 {
		got = append(got, r.take()...)
		if len(got) >= len(want) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let stray extra events show up
	got = append(got, r.take()...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runSource runs src until the test ends.
func runSource(t *testing.T, src source.Source, h source.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestSourceFolder(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), svcYAML+"---\n"+sliceYAML)
	writeFile(t, filepath.Join(dir, "b.yml"), nodeYAML)
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), "not: [valid")
	writeFile(t, filepath.Join(dir, "notes.txt"), "not a manifest")
	var errsMu sync.Mutex
	var errs []error
	src := New(dir, Config{
		Debounce: 20 * time.Millisecond,
		Logger:   testr.New(t),
		OnError: func(err error) {
			errsMu.Lock()
			defer errsMu.Unlock()
			errs = append(errs, err)
		},
	})
	h := newRecordingHandler()
	runSource(t, src, h)
	<-h.synced
	waitEvents(t, h, []string{"add Node test-node", "add Service demo/web", "add EndpointSlice demo/web-1"})

	// Change the service, drop the slice.
	writeFile(t, filepath.Join(dir, "a.yaml"), strings.Replace(svcYAML, "port: 80", "port: 81", 1))
	waitEvents(t, h, []string{"update Service demo/web", "delete EndpointSlice demo/web-1"})

	// A broken file is reported and keeps its last good content.
	writeFile(t, filepath.Join(dir, "a.yaml"), "apiVersion: v1\nkind: Service\nmetadata:\n  name: [x\n")
	waitFor(t, "the error", func() bool {
		errsMu.Lock()
		defer errsMu.Unlock()
		return len(errs) > 0
	})
	waitEvents(t, h, nil)
	errsMu.Lock()
	var me *Error
	if !errors.As(errs[0], &me) || me.Path != filepath.Join(dir, "a.yaml") || me.Line != 4 {
		t.Errorf("error = %v, want %s line 4", errs[0], filepath.Join(dir, "a.yaml"))
	}
	errsMu.Unlock()

	// A new file, and the broken one removed: its last good content goes.
	writeFile(t, filepath.Join(dir, "c.json"), `{"apiVersion":"v1","kind":"Service","metadata":{"name":"api","namespace":"demo"},"spec":{"ports":[{"port":80}]}}`)
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, h, []string{"add Service demo/api", "delete Service demo/web"})
}

func TestSourceFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "all.yaml")
	writeFile(t, path, svcYAML)
	writeFile(t, filepath.Join(dir, "other.yaml"), nodeYAML)
	src := New(path, Config{Debounce: 20 * time.Millisecond, Logger: testr.New(t)})
	h := newRecordingHandler()
	runSource(t, src, h)
	<-h.synced
	waitEvents(t, h, []string{"add Service demo/web"})

	// Other files in the folder are not watched.
	writeFile(t, filepath.Join(dir, "other.yaml"), svcYAML)
	waitEvents(t, h, nil)

	// An editor that writes a new file and renames it over the old one.
	tmp := filepath.Join(dir, ".all.yaml.swp")
	writeFile(t, tmp, svcYAML+"---\n"+sliceYAML)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, h, []string{"add EndpointSlice demo/web-1"})
}

func TestSourceInitialErrors(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.yaml")
	writeFile(t, broken, svcYAML+"---\nkind: [\n")
	for _, tc := range []struct {
		name, path, wantPath string
		wantLine             int
	}{
		{"missing", filepath.Join(dir, "nope"), filepath.Join(dir, "nope"), 0},
		{"broken file", broken, broken, 14},
		{"broken file in folder", dir, broken, 14},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRecordingHandler()
			err := New(tc.path, Config{Logger: testr.New(t)}).Run(context.Background(), h)
			var me *Error
			if !errors.As(err, &me) || me.Path != tc.wantPath || me.Line != tc.wantLine {
				t.Fatalf("Run = %v, want an *Error at %s:%d", err, tc.wantPath, tc.wantLine)
			}
			if got := h.take(); len(got) != 0 {
				t.Errorf("delivered %v before failing", got)
			}
		})
	}
}

// TestSourceMessages: a source names itself, and a missing path is said
// once, in the words of the file system.
func TestSourceMessages(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	s := New(missing, Config{})
	err := s.Run(context.Background(), newRecordingHandler())
	got := []string{s.String(), fmt.Sprint(err), fmt.Sprint(errors.Is(err, fs.ErrNotExist))}
	want := []string{"manifests " + missing, missing + ": no such file or directory", "true"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestDuplicatesFirstWins(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "1.yaml"), svcYAML)
	writeFile(t, filepath.Join(dir, "2.yaml"), strings.Replace(svcYAML, "port: 80", "port: 99", 1))
	src := New(dir, Config{Logger: testr.New(t)})
	var got []int32
	h := &funcHandler{onService: func(_, new *v1.Service) { got = append(got, new.Spec.Ports[0].Port) }}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := src.Run(ctx, h); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int32{80}, got); diff != "" {
		t.Errorf("delivered ports (-want +got):\n%s", diff)
	}
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// funcHandler hands services to a function and ignores everything else.
type funcHandler struct {
	onService func(old, new *v1.Service)
}

func (f *funcHandler) OnService(old, new *v1.Service)                    { f.onService(old, new) }
func (f *funcHandler) OnEndpointSlice(old, new *discovery.EndpointSlice) {}
func (f *funcHandler) OnNode(old, new *v1.Node)                          {}
func (f *funcHandler) Synced()                                           {}
