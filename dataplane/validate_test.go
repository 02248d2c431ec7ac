package dataplane_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestIsInterfaceName(t *testing.T) {
	const (
		chars = "must consist of ASCII letters, digits, '-', '_' and '.' (found %s)"
		long  = "must be no more than 15 bytes (Linux's interface name limit)"
		dots  = `must not be "." or ".."`
		empty = "must not be empty"
	)
	found := func(r string) string { return strings.Replace(chars, "%s", r, 1) }
	for _, tc := range []struct {
		name string
		// bridge is what IsInterfaceName says, prefix what
		// IsInterfaceNamePrefix says.
		bridge, prefix []string
	}{
		{"cbr0", nil, nil},
		{"flannel.1", nil, nil},
		{"br-0a1b2c3d4e5f", nil, nil},
		{"cilium_host", nil, nil},
		{"abcdefghijklmno", nil, nil},
		{"abcdefghijklmnop", []string{long}, []string{long}},
		{"", []string{empty}, []string{empty}},
		{".", []string{dots}, nil},
		{"..", []string{dots}, nil},
		{"...", nil, nil},
		{"br0\n-A INPUT -j ACCEPT\n#", []string{long, found(`'\n'`)}, []string{long, found(`'\n'`)}},
		{"br 0", []string{found(`' '`)}, []string{found(`' '`)}},
		{"br\t0", []string{found(`'\t'`)}, []string{found(`'\t'`)}},
		{`br0"`, []string{found(`'"'`)}, []string{found(`'"'`)}},
		{"veth'", []string{found(`'\''`)}, []string{found(`'\''`)}},
		{"veth\n", []string{found(`'\n'`)}, []string{found(`'\n'`)}},
		{"br\x000", []string{found(`'\x00'`)}, []string{found(`'\x00'`)}},
		{"a/b", []string{found(`'/'`)}, []string{found(`'/'`)}},
		{"eth0:1", []string{found(`':'`)}, []string{found(`':'`)}},
		{"br+", []string{found(`'+'`)}, []string{found(`'+'`)}},
		{"veth*", []string{found(`'*'`)}, []string{found(`'*'`)}},
		{`br\`, []string{found(`'\\'`)}, []string{found(`'\\'`)}},
		{"#br", []string{found(`'#'`)}, []string{found(`'#'`)}},
		{"brü", []string{found(`'ü'`)}, []string{found(`'ü'`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := [2][]string{dataplane.IsInterfaceName(tc.name), dataplane.IsInterfaceNamePrefix(tc.name)}
			if diff := cmp.Diff([2][]string{tc.bridge, tc.prefix}, got); diff != "" {
				t.Errorf("(-want +got) [bridge, prefix]:\n%s", diff)
			}
		})
	}
}

func TestSettingsValidate(t *testing.T) {
	bridge := func(name string) dataplane.Settings {
		return dataplane.Settings{LocalDetector: dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: name}}
	}
	prefix := func(name string) dataplane.Settings {
		return dataplane.Settings{LocalDetector: dataplane.LocalDetector{Mode: dataplane.LocalModeInterfaceNamePrefix, Interface: name}}
	}
	for _, tc := range []struct {
		name     string
		settings dataplane.Settings
		want     string
	}{
		{"zero", dataplane.Settings{}, ""},
		{"bridge", bridge("cbr0"), ""},
		{"bridge without a name detects nothing", bridge(""), ""},
		{"prefix", prefix("veth"), ""},
		{"prefix .", prefix("."), ""},
		{"injected bridge", bridge("br0\n-A INPUT -j ACCEPT\n#"),
			`[Settings.LocalDetector.Interface: Invalid value: "br0\n-A INPUT -j ACCEPT\n#": must be no more than 15 bytes (Linux's interface name limit), ` +
				`Settings.LocalDetector.Interface: Invalid value: "br0\n-A INPUT -j ACCEPT\n#": must consist of ASCII letters, digits, '-', '_' and '.' (found '\n')]`},
		{"bridge ..", bridge(".."), `Settings.LocalDetector.Interface: Invalid value: "..": must not be "." or ".."`},
		{"16-byte prefix", prefix("abcdefghijklmnop"), `Settings.LocalDetector.Interface: Invalid value: "abcdefghijklmnop": must be no more than 15 bytes (Linux's interface name limit)`},
		{"huge name is cut", bridge(strings.Repeat("a", 300)),
			`Settings.LocalDetector.Interface: Invalid value: "` + strings.Repeat("a", 256) + `...": must be no more than 15 bytes (Linux's interface name limit)`},
		{"unknown mode", dataplane.Settings{LocalDetector: dataplane.LocalDetector{Mode: "Guess"}},
			`Settings.LocalDetector.Mode: Unsupported value: "Guess": supported values: "", "ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix"`},
		{"cluster CIDRs", dataplane.Settings{LocalDetector: dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR,
			CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), {}, netip.MustParsePrefix("::ffff:10.0.0.0/104")}}},
			`[Settings.LocalDetector.CIDRs[1]: Invalid value: "invalid Prefix": must be a valid CIDR, ` +
				`Settings.LocalDetector.CIDRs[2]: Invalid value: "::ffff:10.0.0.0/104": must not be an IPv4-mapped IPv6 CIDR: give the IPv4 CIDR]`},
		{"node port addresses", dataplane.Settings{NodePortAddresses: []netip.Prefix{{}}},
			`Settings.NodePortAddresses[0]: Invalid value: "invalid Prefix": must be a valid CIDR`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.settings.Validate()
			got := ""
			if err != nil {
				got = err.Error()
				var se *dataplane.SettingsError
				var fe *field.Error
				if !errors.As(err, &se) || !errors.As(err, &fe) {
					t.Errorf("%v is not a *SettingsError of *field.Errors", err)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestLocalDetectorValidate(t *testing.T) {
	d := dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: "br 0"}
	want := `LocalDetector.Interface: Invalid value: "br 0": must consist of ASCII letters, digits, '-', '_' and '.' (found ' ')`
	if diff := cmp.Diff(want, d.Validate().Error()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// A bridge name that would add a rule to an iptables-restore input is
// refused before any dataplane sees it.
func ExampleSettings_Validate() {
	s := dataplane.Settings{LocalDetector: dataplane.LocalDetector{
		Mode:      dataplane.LocalModeBridgeInterface,
		Interface: "br0\n-A INPUT -j ACCEPT",
	}}
	err := s.Validate()
	var fe *field.Error
	if errors.As(err, &fe) {
		fmt.Println(fe.Field)
		fmt.Println(fe.Detail)
	}
	// Output:
	// Settings.LocalDetector.Interface
	// must be no more than 15 bytes (Linux's interface name limit)
}
