package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestIdentitiesAndTokens(t *testing.T) {
	want := []identity{
		{File: "admin.kubeconfig", User: "admin", UID: "admin", Groups: []string{"system:masters"}},
		{File: "kube-proxy.kubeconfig", User: "system:kube-proxy", UID: "kube-proxy"},
		{File: "e2e-node-1.kubeconfig", User: "system:node:e2e-node-1", UID: "e2e-node-1", Groups: []string{"system:nodes"}},
		{File: "e2e-node-2.kubeconfig", User: "system:node:e2e-node-2", UID: "e2e-node-2", Groups: []string{"system:nodes"}},
	}
	if diff := cmp.Diff(want, identities(2)); diff != "" {
		t.Errorf("identities (-want +got):\n%s", diff)
	}
	ids, err := withTokens(identities(2))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if len(id.Token) != 32 || seen[id.Token] {
			t.Errorf("%s: token %q: want 32 hex digits, each token once", id.User, id.Token)
		}
		seen[id.Token] = true
	}
	for i := range ids {
		ids[i].Token = "t" + ids[i].UID
	}
	wantCSV := `tadmin,admin,admin,"system:masters"
tkube-proxy,system:kube-proxy,kube-proxy
te2e-node-1,system:node:e2e-node-1,e2e-node-1,"system:nodes"
te2e-node-2,system:node:e2e-node-2,e2e-node-2,"system:nodes"
`
	if diff := cmp.Diff(wantCSV, string(tokensCSV(ids))); diff != "" {
		t.Errorf("tokens.csv (-want +got):\n%s", diff)
	}
}

func TestKubeconfig(t *testing.T) {
	id := identity{User: "system:kube-proxy", Token: "secret"}
	b, err := kubeconfigBytes("https://10.88.0.2:6443", []byte("CA PEM"), id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := clientcmd.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"e2e": {Server: "https://10.88.0.2:6443", CertificateAuthorityData: []byte("CA PEM")}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"system:kube-proxy": {Token: "secret"}},
		Contexts:       map[string]*clientcmdapi.Context{"e2e": {Cluster: "e2e", AuthInfo: "system:kube-proxy"}},
		CurrentContext: "e2e",
	}
	// Load fills in LocationOfOrigin and empty Extensions maps.
	opts := cmp.Options{
		cmpopts.IgnoreFields(clientcmdapi.Cluster{}, "LocationOfOrigin", "Extensions"),
		cmpopts.IgnoreFields(clientcmdapi.AuthInfo{}, "LocationOfOrigin", "Extensions"),
		cmpopts.IgnoreFields(clientcmdapi.Context{}, "LocationOfOrigin", "Extensions"),
		cmpopts.IgnoreFields(clientcmdapi.Config{}, "Preferences", "Extensions"),
	}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("kubeconfig (-want +got):\n%s", diff)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://10.88.0.2:6443" || rc.BearerToken != "secret" || string(rc.CAData) != "CA PEM" {
		t.Errorf("REST config: host %q token %q CA %q", rc.Host, rc.BearerToken, rc.CAData)
	}
}
