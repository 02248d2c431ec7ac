package conntrack

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestKernelDNATFlows: a datagram DNATed by the node namespace is listed
// with its client, frontend and endpoint.
func TestKernelDNATFlows(t *testing.T) {
	l := newLab(t)
	atA := listen(t, l.podA, fmt.Sprintf("%s:%d", podAIP, podPort))
	l.program(t, dnat(svcIP, 53, podAIP))
	conn := l.dial(t, clientPort+7, svcIP+":53")
	var buf [4]byte
	binary.BigEndian.PutUint32(buf[:], 1)
	if _, err := conn.Write(buf[:]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, atA, 1, "the DNATed datagram")

	flows, err := DNATFlows(t.Context(), l.nodeHandle(t), v1.IPv4Protocol)
	if err != nil {
		t.Fatal(err)
	}
	want := Flow{Protocol: v1.ProtocolUDP,
		Client:   netip.MustParseAddrPort(fmt.Sprintf("10.100.0.2:%d", clientPort+7)),
		Frontend: netip.MustParseAddrPort(svcIP + ":53"),
		Endpoint: netip.MustParseAddrPort(fmt.Sprintf("%s:%d", podAIP, podPort))}
	if !slices.Contains(flows, want) {
		t.Errorf("DNATFlows = %+v, want it to hold %+v", flows, want)
	}
}
