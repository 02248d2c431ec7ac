package kpconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeErrors(t *testing.T) {
	c, err := NewCodecs()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, in, want string
	}{
		{"not YAML", "mode: [", "yaml: line 1: did not find expected node content"},
		{"no kind", "mode: iptables\n", "Object 'Kind' is missing in 'mode: iptables\n'"},
		{"another kind", "apiVersion: v1\nkind: ConfigMap\n", `no kind "ConfigMap" is registered for version "v1" in scheme`},
		{"wrong type", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\noomScoreAdj: low\n", "cannot unmarshal"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Decode([]byte(tt.in))
			if err == nil || !contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestLenientDecoding(t *testing.T) {
	c, err := NewCodecs()
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Decode([]byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nmode: nftables\nbogus: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := []string{string(d.Config.Mode), d.Lenient.Error()}
	want := []string{"nftables", `strict decoding error: yaml: unmarshal errors:
  line 4: key "mode" already set in map, unknown field "bogus"`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseGates(t *testing.T) {
	got := map[string]bool{}
	if err := ParseGates("KubeProxyIPVS=false, NFTablesNetlink=true,KubeProxyIPVS=true", got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{"KubeProxyIPVS": true, "NFTablesNetlink": true}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"KubeProxyIPVS", "KubeProxyIPVS=maybe"} {
		if err := ParseGates(bad, map[string]bool{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
