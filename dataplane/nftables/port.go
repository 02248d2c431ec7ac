package nftables

import (
	"github.com/proxykit/proxykit/internal/ruleport"
	"github.com/proxykit/proxykit/servicemodel"
)

// port is a ServicePort checked to be safe to write into a rule.
type port struct {
	*ruleport.Port
	// order sorts ports as dataplane.Lookup breaks ties: when several claim
	// one destination, the first wins.
	order string
}

// checkPort validates sp; a non-empty reason means it must be skipped.
// skipPart is told about addresses dropped from an otherwise good port.
func checkPort(sp *servicemodel.ServicePort, ipv6 bool, skipPart func(reason string)) (*port, string) {
	rp, reason := ruleport.Check(sp, ipv6, skipPart)
	if reason != "" {
		return nil, reason
	}
	n := sp.Name
	return &port{Port: rp, order: n.Namespace + "\x00" + n.Name + "\x00" + n.Port + "\x00" + string(sp.Protocol)}, ""
}
