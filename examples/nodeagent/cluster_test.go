package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// fakeAPIServer serves lists of the demo's DNS service, its slice and the
// demo node, and watches that never report a change: enough for the
// informers to sync.
func fakeAPIServer(t *testing.T) string {
	t.Helper()
	objs, err := demoObjects()
	if err != nil {
		t.Fatal(err)
	}
	var svcs v1.ServiceList
	var slices discovery.EndpointSliceList
	var nodes v1.NodeList
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.Service:
			svcs.Items = append(svcs.Items, *o)
		case *discovery.EndpointSlice:
			slices.Items = append(slices.Items, *o)
		case *v1.Node:
			nodes.Items = append(nodes.Items, *o)
		}
	}
	lists := map[string]runtime.Object{
		"/api/v1/services":                         &svcs,
		"/apis/discovery.k8s.io/v1/endpointslices": &slices,
		"/api/v1/nodes":                            &nodes,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		list, ok := lists[r.URL.Path]
		switch {
		case !ok:
			http.NotFound(w, r)
		case r.URL.Query().Get("watch") == "true":
			if r.URL.Query().Get("sendInitialEvents") == "true" {
				// No streaming lists here: the client falls back to LIST.
				http.Error(w, "sendInitialEvents is not supported", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			list.(metav1.ListMetaAccessor).GetListMeta().SetResourceVersion("1")
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(list)
		}
	}))
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {token: fake}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

func TestExplainCluster(t *testing.T) {
	kubeconfig := fakeAPIServer(t)
	code, out, errOut := runAgent(t, "--kubeconfig", kubeconfig, "--hostname-override", "demo-node",
		"explain", "10.244.0.5", "10.96.0.10:53/UDP")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	want := map[string]string{
		"packet": "10.244.0.5 -> 10.96.0.10:53/UDP", "from": "pod (inferred from the source; choose with --from)",
		"action": "DNAT", "service": "kube-system/kube-dns:dns/UDP",
		"endpoints":  "10.244.0.2:53, 10.244.1.3:53 (one is picked per connection)",
		"masquerade": "no", "affinity": "no",
	}
	if diff := cmp.Diff(want, verdict(out)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestDryRunCluster(t *testing.T) {
	kubeconfig := fakeAPIServer(t)
	code, out, errOut := runAgent(t, "--kubeconfig", kubeconfig, "--hostname-override", "demo-node", "--dry-run", "--once")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	if want := `"default/web:http cluster IP" -m tcp -p tcp -d 10.96.10.10 --dport 80`; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}
