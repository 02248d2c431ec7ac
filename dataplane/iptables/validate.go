package iptables

import (
	"strings"

	"github.com/proxykit/proxykit/internal/ruleport"
	"github.com/proxykit/proxykit/servicemodel"
)

// port is a ServicePort checked to be safe to write into a rule, with the
// names its rules use.
type port struct {
	*ruleport.Port
	// key orders the port's rules in the shared chains.
	key string
	// id is upstream's hash input: "ns/name:port" + lowercase protocol.
	id string
	// name is the "ns/name:port" string used in comments.
	name string
}

// checkPort validates sp; a non-empty reason means it must be skipped.
// skipPart is told about addresses dropped from an otherwise good port.
func checkPort(sp *servicemodel.ServicePort, ipv6 bool, skipPart func(reason string)) (*port, string) {
	rp, reason := ruleport.Check(sp, ipv6, skipPart)
	if reason != "" {
		return nil, reason
	}
	n := sp.Name
	// The id is the name and the protocol: both are one string, made once
	// per port of a full rendering.
	var b strings.Builder
	b.Grow(len(n.Namespace) + len(n.Name) + len(n.Port) + len(rp.Proto) + 2)
	b.WriteString(n.Namespace)
	b.WriteByte('/')
	b.WriteString(n.Name)
	if n.Port != "" {
		b.WriteByte(':')
		b.WriteString(n.Port)
	}
	b.WriteString(rp.Proto)
	id := b.String()
	// The key sorts like dataplane's lookup order (namespace, name, port,
	// protocol), so the first matching rule is the port Lookup picks.
	key := n.Namespace + "\x00" + n.Name + "\x00" + n.Port + "\x00" + string(sp.Protocol)
	return &port{Port: rp, key: key, id: id, name: id[:len(id)-len(rp.Proto)]}, ""
}
