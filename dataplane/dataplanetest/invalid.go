package dataplanetest

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// InjectedInterface is a bridge name that, written verbatim into an
// iptables-restore input, adds a rule accepting all input: the name a
// dataplane must never write anywhere.
const InjectedInterface = "br0\n-A INPUT -j ACCEPT\n#"

// InvalidSettings returns, by name, Settings that dataplane.Settings.Validate
// refuses: each is DefaultSettings with one bad value, a local-traffic
// detector's interface that would break out of an iptables-restore line or
// an nft string, one Linux refuses, an unknown mode, or a node port CIDR
// that is no prefix.
func InvalidSettings() map[string]dataplane.Settings {
	bridge := func(name string) dataplane.LocalDetector {
		return dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: name}
	}
	prefix := func(name string) dataplane.LocalDetector {
		return dataplane.LocalDetector{Mode: dataplane.LocalModeInterfaceNamePrefix, Interface: name}
	}
	out := map[string]dataplane.Settings{}
	for name, d := range map[string]dataplane.LocalDetector{
		"injected bridge":   bridge(InjectedInterface),
		"bridge with space": bridge("br 0"),
		"bridge with quote": bridge(`br0"`),
		"prefix with quote": prefix("veth'"),
		"prefix newline":    prefix("veth\n"),
		"16-byte bridge":    bridge("abcdefghijklmnop"),
		"16-byte prefix":    prefix("abcdefghijklmnop"),
		"wildcard bridge":   bridge("br+"),
		"bridge ..":         bridge(".."),
		"unknown mode":      {Mode: "Guess", Interface: "cbr0"},
	} {
		s := DefaultSettings()
		s.LocalDetector = d
		out[name] = s
	}
	s := DefaultSettings()
	s.NodePortAddresses = append(s.NodePortAddresses, netip.Prefix{})
	out["zero node port CIDR"] = s
	return out
}

// CheckRefusesInvalidSettings syncs into d (of family) a small cluster
// under DefaultSettings, then States of the same cluster under each of
// InvalidSettings: each of those Syncs must fail with an error wrapping a
// *dataplane.SettingsError, and programmed, which returns what d's kernel
// (or fake) holds, must not change. A dataplane that left the bad value out
// instead, or wrote it, fails.
func CheckRefusesInvalidSettings(t *testing.T, d dataplane.Dataplane, family v1.IPFamily, programmed func() string) {
	t.Helper()
	ctx := t.Context()
	good := invalidCluster(family, DefaultSettings())
	_, st := good.Build(t)
	if err := d.Sync(ctx, st); err != nil {
		t.Fatalf("%s: Sync of valid settings: %v", d.Name(), err)
	}
	before := programmed()
	for name, set := range InvalidSettings() {
		t.Run(name, func(t *testing.T) {
			// Not through a Builder, which drops CIDRs that are no
			// prefix: the dataplane must refuse what any caller builds.
			bad := &dataplane.State{Family: st.Family, Node: st.Node, Settings: set, Services: st.Services, Endpoints: st.Endpoints}
			err := d.Sync(ctx, bad)
			var se *dataplane.SettingsError
			if !errors.As(err, &se) {
				t.Fatalf("%s: Sync = %v, want a *dataplane.SettingsError", d.Name(), err)
			}
			if after := programmed(); after != before {
				t.Errorf("%s: a refused Sync changed what is programmed:\nbefore:\n%s\nafter:\n%s", d.Name(), before, after)
			}
		})
	}
}

// invalidCluster is one ClusterIP service with a local and a remote
// endpoint under settings.
func invalidCluster(family v1.IPFamily, settings dataplane.Settings) Scenario {
	ip, ep1, ep2 := "172.30.0.41", "10.180.0.1", "10.180.1.1"
	if family == v1.IPv6Protocol {
		ip, ep1, ep2 = "fd00:172:30::41", "fd00:10:180::1", "fd00:10:180::1:1"
	}
	svc := MakeService("ns1", "svc1", func(s *v1.Service) {
		s.Spec.ClusterIP = ip
		s.Spec.IPFamilies = []v1.IPFamily{family}
		s.Spec.Ports = []v1.ServicePort{ServicePort("p80", v1.ProtocolTCP, 80, 0, 80)}
	})
	sl := MakeSlice("ns1", "svc1", 0, func(sl *discovery.EndpointSlice) {
		if family == v1.IPv6Protocol {
			sl.AddressType = discovery.AddressTypeIPv6
		}
		sl.Ports = []discovery.EndpointPort{SlicePort("p80", v1.ProtocolTCP, 80)}
		sl.Endpoints = []discovery.Endpoint{ReadyEndpoint(ep1, NodeName), ReadyEndpoint(ep2, "remote")}
	})
	return Scenario{
		Name: "invalid settings", Family: family, Node: TestNode(nil), Settings: settings,
		Services: []*v1.Service{svc}, Slices: []*discovery.EndpointSlice{sl},
	}
}
