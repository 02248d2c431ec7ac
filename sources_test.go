package proxykit

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/source"
	"github.com/proxykit/proxykit/source/manifest"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const manifestYAML = `apiVersion: v1
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
---
apiVersion: discovery.k8s.io/v1
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

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestProxyManifestEndToEnd runs a proxy on a manifest file and edits it.
func TestProxyManifestEndToEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.yaml")
	writeFile(t, path, manifestYAML+"---\n"+nodeYAML)
	rec := dataplanetest.NewRecorder("rec")
	h := newProxyHarness(t, Config{
		NodeName:   dataplanetest.NodeName,
		Dataplanes: []DataplaneConfig{{Dataplane: rec}},
		Sources:    []source.Source{manifest.New(path, manifest.Config{Debounce: 20 * time.Millisecond, Logger: testLogger(t)})},
	}).start()
	syncsOf(t, rec, 1)
	want := []string{"demo/web:http/TCP 172.30.0.1:80/TCP -> 10.0.0.1:8080"}
	if diff := cmp.Diff(want, stateSummary(rec.Programmed())); diff != "" {
		t.Errorf("programmed (-want +got):\n%s", diff)
	}
	if code, _, _ := serve(t, h.p.HealthzHandler()); code != 200 {
		t.Errorf("/healthz = %d with the node in the manifest", code)
	}
	writeFile(t, path, strings.Replace(manifestYAML, "10.0.0.1", "10.0.0.2", 1))
	waitFor(t, "the edit programmed", func() bool {
		got := stateSummary(rec.Programmed())
		return len(got) == 1 && strings.HasSuffix(got[0], "10.0.0.2:8080")
	})
}

// lineLog collects the lines a logr.Logger writes at verbosity 0.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

// with returns the lines whose message starts with one of msgs.
func (l *lineLog) with(msgs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		for _, m := range msgs {
			if strings.Contains(line, `"msg"="`+m) {
				out = append(out, line)
			}
		}
	}
	return out
}

// TestStartupLog: at verbosity 0 the proxy says what it runs, and warns
// once the sources have synced when none delivered its Node.
func TestStartupLog(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: dataplanetest.NodeName}}
	svc := udpService("ns", "a", "172.30.0.10", 53)
	const noNode = `"level"=0 "msg"="Sources synced without this proxy's Node: /healthz answers 503 and topology is unknown until it appears; check the node name" "node"="` + dataplanetest.NodeName + `"`
	for _, tc := range []struct {
		name     string
		nodeName string
		sources  []source.Source
		settings dataplane.Settings
		want     []string
	}{{
		name:     "node delivered",
		nodeName: dataplanetest.NodeName,
		sources:  []source.Source{source.Static{svc, node}},
		settings: dataplane.Settings{
			LocalDetector:     dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
			NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")},
			NodePortPrimary:   true,
		},
		want: []string{
			`"level"=0 "msg"="Starting proxy" "node"="` + dataplanetest.NodeName + `" "ipFamilies"=["IPv4" "IPv6"] "dataplanes"=["a (IPv4)" "b (IPv6)"] "sources"=["static objects"] "clusterCIDRs"=["10.0.0.0/8"] "nodePortAddresses"=["192.168.0.0/16" "primary"]`,
		},
	}, {
		name:     "node missing, own source",
		nodeName: dataplanetest.NodeName,
		sources:  []source.Source{source.Func(func(ctx context.Context, h source.Handler) error { h.Synced(); <-ctx.Done(); return nil })},
		settings: dataplane.Settings{MasqueradeAll: true},
		want: []string{
			`"level"=0 "msg"="Starting proxy" "node"="` + dataplanetest.NodeName + `" "ipFamilies"=["IPv4" "IPv6"] "dataplanes"=["a (IPv4)" "b (IPv6)"] "sources"=["source.Func"] "clusterCIDRs"=[] "nodePortAddresses"=["all"] "masqueradeAll"=true`,
			noNode,
		},
	}, {
		name:     "no node name",
		sources:  []source.Source{source.Static{svc}},
		settings: dataplane.Settings{LocalDetector: dataplane.LocalDetector{Mode: dataplane.LocalModeNodeCIDR}},
		want: []string{
			`"level"=0 "msg"="Starting proxy" "node"="" "ipFamilies"=["IPv4" "IPv6"] "dataplanes"=["a (IPv4)" "b (IPv6)"] "sources"=["static objects"] "localTrafficDetection"="NodeCIDR" "nodePortAddresses"=["all"]`,
		},
	}, {
		name:     "fed through Handler alone",
		nodeName: dataplanetest.NodeName,
		want: []string{
			`"level"=0 "msg"="Starting proxy" "node"="` + dataplanetest.NodeName + `" "ipFamilies"=["IPv4" "IPv6"] "dataplanes"=["a (IPv4)" "b (IPv6)"] "sources"=[] "clusterCIDRs"=[] "nodePortAddresses"=["all"]`,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var log lineLog
			h := newProxyHarness(t, Config{
				NodeName: tc.nodeName,
				Dataplanes: []DataplaneConfig{
					{Dataplane: dataplanetest.NewRecorder("a")},
					{Family: v1.IPv6Protocol, Dataplane: dataplanetest.NewRecorder("b")},
				},
				Sources:  tc.sources,
				Settings: tc.settings,
				Logger:   log.logger(),
			})
			if err := h.p.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, log.with("Starting proxy", "Sources synced without")); diff != "" {
				t.Errorf("log lines (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSourceErrorNamesSource: a failed source is reported in its own
// words, never by its position in Config.Sources.
func TestSourceErrorNamesSource(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	h := newProxyHarness(t, Config{
		Dataplanes: []DataplaneConfig{{Dataplane: dataplanetest.NewRecorder("rec")}},
		Sources: []source.Source{
			source.Static{},
			manifest.New(missing, manifest.Config{}),
		},
	})
	err := h.p.RunOnce(context.Background())
	want := "manifests " + missing + ": " + missing + ": no such file or directory"
	if err == nil || err.Error() != want {
		t.Errorf("RunOnce = %v, want %q", err, want)
	}
}
