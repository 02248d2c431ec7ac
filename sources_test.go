package proxykit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/source"
	"github.com/proxykit/proxykit/source/manifest"
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
