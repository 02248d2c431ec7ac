package nftables

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"
)

// The dataplane's fixed chains, sets and maps, named as kube-proxy's so
// that people who know one table can read the other.
const (
	chainServices         = "services"
	chainMasquerading     = "masquerading"
	chainClusterIPsCheck  = "cluster-ips-check"
	chainRejectChain      = "reject-chain"
	chainServiceEPCheck   = "service-endpoints-check"
	chainNodePortEPCheck  = "nodeport-endpoints-check"
	chainFirewallCheck    = "firewall-check"
	setClusterIPs         = "cluster-ips"
	setNodePortIPs        = "nodeport-ips"
	setHairpin            = "hairpin-connections"
	mapServiceIPs         = "service-ips"
	mapServiceNodePorts   = "service-nodeports"
	mapFirewallIPs        = "firewall-ips"
	mapNoEndpointServices = "no-endpoint-services"
	mapNoEndpointNodePort = "no-endpoint-nodeports"
)

// Prefixes of the per-service objects. Their names all hold a '/', which
// no fixed chain does: that is how the dataplane tells its service chains
// from the rest.
const (
	prefixService  = "service-"
	prefixLocal    = "local-"
	prefixExternal = "external-"
	prefixFirewall = "firewall-"
	prefixEndpoint = "endpoint-"
	prefixAffinity = "affinity-"
)

// isServiceChain reports whether a chain of the table is a per-service one.
func isServiceChain(name string) bool { return strings.Contains(name, "/") }

// maxNameBase leaves room for the longest prefix within nftables' name
// limit.
const maxNameBase = knftables.NameLengthMax - 16

var nameEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// hashedName is base prefixed by 8 characters of its hash, so that names
// stay unique when a long base is cut.
func hashedName(base string) string {
	sum := sha256.Sum256([]byte(base))
	name := nameEncoding.EncodeToString(sum[:])[:8] + "-" + base
	if len(name) > maxNameBase {
		name = name[:maxNameBase-3] + "..."
	}
	return name
}

// portBase is "namespace/name/protocol/port", the base of a service port's
// object names.
func portBase(p *port) string {
	n := p.SP.Name
	return n.Namespace + "/" + n.Name + "/" + p.Proto + "/" + n.Port
}

// endpointBase is the base of an endpoint's chain and affinity set: the
// port's base, then the endpoint's address with ':' (IPv6) spelled '.'.
func endpointBase(portBase string, ep netip.AddrPort) string {
	return portBase + "__" + strings.ReplaceAll(ep.Addr().String(), ":", ".") + "/" + strconv.Itoa(int(ep.Port()))
}
