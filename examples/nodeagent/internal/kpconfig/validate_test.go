package kpconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
)

// TestValidateValuesInRules: every value the agent writes into a rule is
// checked here, in every mode, and each error names the field.
func TestValidateValuesInRules(t *testing.T) {
	const (
		chars  = "must consist of ASCII letters, digits, '-', '_' and '.' (found %s)"
		long   = "must be no more than 15 bytes (Linux's interface name limit)"
		mapped = "must not be an IPv4-mapped IPv6 CIDR: give the IPv4 CIDR"
	)
	found := func(r string) string { return strings.Replace(chars, "%s", r, 1) }
	bridge := func(name string) func(*v1alpha1.KubeProxyConfiguration) {
		return func(c *v1alpha1.KubeProxyConfiguration) {
			c.DetectLocalMode, c.DetectLocal.BridgeInterface = LocalBridgeInterface, name
		}
	}
	prefix := func(name string) func(*v1alpha1.KubeProxyConfiguration) {
		return func(c *v1alpha1.KubeProxyConfiguration) {
			c.DetectLocalMode, c.DetectLocal.InterfaceNamePrefix = LocalInterfaceNamePrefix, name
		}
	}
	const bi, ip = "detectLocal.bridgeInterface: Invalid value: ", "detectLocal.interfaceNamePrefix: Invalid value: "
	for _, tc := range []struct {
		name string
		edit func(*v1alpha1.KubeProxyConfiguration)
		want []string
	}{
		{"bridge", bridge("cbr0"), nil},
		{"prefix", prefix("veth"), nil},
		{"15-byte bridge", bridge("abcdefghijklmno"), nil},
		{"empty bridge", bridge(""), []string{bi + `"": must not be empty`}},
		{"empty prefix", prefix(""), []string{ip + `"": must not be empty`}},
		{"injected bridge", bridge("br0\n-A INPUT -j ACCEPT\n#"), []string{
			bi + `"br0\n-A INPUT -j ACCEPT\n#": ` + long,
			bi + `"br0\n-A INPUT -j ACCEPT\n#": ` + found(`'\n'`),
		}},
		{"bridge with a space", bridge("br 0"), []string{bi + `"br 0": ` + found(`' '`)}},
		{"bridge with a quote", bridge(`br0"`), []string{bi + `"br0\"": ` + found(`'"'`)}},
		{"bridge with a newline", bridge("br0\n"), []string{bi + `"br0\n": ` + found(`'\n'`)}},
		{"16-byte bridge", bridge("abcdefghijklmnop"), []string{bi + `"abcdefghijklmnop": ` + long}},
		{"bridge ..", bridge(".."), []string{bi + `"..": must not be "." or ".."`}},
		{"prefix with a space", prefix("veth "), []string{ip + `"veth ": ` + found(`' '`)}},
		{"prefix with a quote", prefix("veth'"), []string{ip + `"veth'": ` + found(`'\''`)}},
		{"prefix with a newline", prefix("veth\n"), []string{ip + `"veth\n": ` + found(`'\n'`)}},
		{"16-byte prefix", prefix("abcdefghijklmnop"), []string{ip + `"abcdefghijklmnop": ` + long}},
		{"prefix .", prefix("."), nil},
		// A name the mode does not use reaches no rule, as in kube-proxy.
		{"bridge unused", func(c *v1alpha1.KubeProxyConfiguration) { c.DetectLocal.BridgeInterface = "br 0" }, nil},
		{"mapped cluster CIDR", func(c *v1alpha1.KubeProxyConfiguration) { c.ClusterCIDR = "::ffff:10.0.0.0/104" },
			[]string{`clusterCIDR[0]: Invalid value: "::ffff:10.0.0.0/104": ` + mapped}},
		{"mapped node port CIDR", func(c *v1alpha1.KubeProxyConfiguration) { c.NodePortAddresses = []string{"::ffff:10.0.0.0/104"} },
			[]string{`nodePortAddresses[0]: Invalid value: "::ffff:10.0.0.0/104": ` + mapped}},
	} {
		for _, mode := range []v1alpha1.ProxyMode{ModeIPTables, ModeNFTables, ModeIPVS, ModeUserspace} {
			t.Run(tc.name+"/"+string(mode), func(t *testing.T) {
				c := New()
				c.Mode = mode
				c.ClusterCIDR = "10.244.0.0/16"
				tc.edit(c)
				Complete(c)
				var got []string
				for _, e := range Validate(c, ValidateOptions{ExtraModes: []v1alpha1.ProxyMode{ModeUserspace}}) {
					got = append(got, e.Error())
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			})
		}
	}
}
