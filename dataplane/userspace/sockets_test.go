package userspace

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

func TestListeningSockets(t *testing.T) {
	type socket struct {
		proto v1.Protocol
		addr  string
	}
	tcp := func(addrs ...string) []socket {
		var out []socket
		for _, a := range addrs {
			out = append(out, socket{v1.ProtocolTCP, a})
		}
		return out
	}
	cases := []struct {
		name    string
		sockets []socket
		// ask are the TCP addresses asked about; want those that listen.
		ask, want []string
	}{{
		name: "none",
		ask:  []string{"172.30.0.10:80", "0.0.0.0:80"},
	}, {
		// A cluster IP's transparent socket and a LoadBalancer IP's share
		// the port; neither stands in for the other.
		name:    "bound to an address",
		sockets: tcp("5.6.7.8:80"),
		ask:     []string{"5.6.7.8:80", "172.30.0.10:80", "5.6.7.8:81"},
		want:    []string{"5.6.7.8:80"},
	}, {
		name:    "IPv4 unspecified takes IPv4 alone",
		sockets: tcp("0.0.0.0:80"),
		ask:     []string{"172.30.0.10:80", "0.0.0.0:80", "[fd00::10]:80", "[::]:80"},
		want:    []string{"172.30.0.10:80", "0.0.0.0:80"},
	}, {
		name:    "IPv6 unspecified is dual-stack",
		sockets: tcp("[::]:80"),
		ask:     []string{"172.30.0.10:80", "0.0.0.0:80", "[fd00::10]:80", "[::]:80"},
		want:    []string{"172.30.0.10:80", "0.0.0.0:80", "[fd00::10]:80", "[::]:80"},
	}, {
		name:    "bound to an IPv6 address",
		sockets: tcp("[fd00::10]:80"),
		ask:     []string{"[fd00::10]:80", "[fd00::11]:80", "[::]:80", "0.0.0.0:80"},
		want:    []string{"[fd00::10]:80", "[::]:80"},
	}, {
		// An IPv6 socket bound to an IPv4-mapped address takes that IPv4
		// address's packets.
		name:    "IPv4-mapped",
		sockets: tcp("[::ffff:172.30.0.10]:80"),
		ask:     []string{"172.30.0.10:80", "[::ffff:172.30.0.10]:80", "0.0.0.0:80", "5.6.7.8:80", "[::]:80"},
		want:    []string{"172.30.0.10:80", "[::ffff:172.30.0.10]:80", "0.0.0.0:80"},
	}, {
		// A REDIRECT leads to any address of the node at its port.
		name:    "unspecified asked, any socket of the family on the port",
		sockets: tcp("5.6.7.8:34695", "192.168.0.2:36955"),
		ask:     []string{"0.0.0.0:34695", "0.0.0.0:36955", "0.0.0.0:32937", "[::]:34695"},
		want:    []string{"0.0.0.0:34695", "0.0.0.0:36955"},
	}, {
		name:    "another protocol",
		sockets: []socket{{v1.ProtocolUDP, "0.0.0.0:53"}, {v1.ProtocolSCTP, "172.30.0.10:80"}},
		ask:     []string{"0.0.0.0:53", "172.30.0.10:80"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s ListeningSockets
			for _, so := range tc.sockets {
				s.Add(so.proto, netip.MustParseAddrPort(so.addr))
			}
			var got []string
			for _, a := range tc.ask {
				if s.Listening(v1.ProtocolTCP, netip.MustParseAddrPort(a)) {
					got = append(got, a)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("listening among %v (-want +got):\n%s", tc.ask, diff)
			}
		})
	}
}
