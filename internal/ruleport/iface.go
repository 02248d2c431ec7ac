package ruleport

import (
	"strings"

	"github.com/proxykit/proxykit/dataplane"
)

// EntersVia reports whether p matches an iptables "-i name" (a trailing
// + is a prefix). Packets from the node have no input interface; a pod
// packet with no interface given counts as entering through the pods'
// interface, as State.Lookup assumes.
func EntersVia(p dataplane.Packet, name string) bool {
	switch {
	case p.From == dataplane.FromNode:
		return false
	case p.Interface == "":
		return p.From == dataplane.FromLocalPod
	}
	if pre, ok := strings.CutSuffix(name, "+"); ok {
		return strings.HasPrefix(p.Interface, pre)
	}
	return p.Interface == name
}
