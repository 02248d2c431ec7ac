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
	// prefixUnserved is the chain a port's no-endpoint elements go to
	// when its name is too long for their comments (fitsComment).
	prefixUnserved = "unserved-"
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
	// Five bytes are the first eight characters.
	var head [8]byte
	nameEncoding.Encode(head[:], sum[:5])
	name := string(head[:]) + "-" + base
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

// maxComment is the longest comment nft and the kernel's nftables accept,
// in bytes: a longer one fails the whole transaction.
const maxComment = 128

// truncated ends a comment cut to maxComment.
const truncated = "..."

// commentOf is the comment of an element of port base: the base, or,
// where long names make it longer than nft accepts, its beginning ending
// in truncated (which the tracer reads as no name).
func commentOf(base string) string {
	if fitsComment(base) {
		return base
	}
	return base[:maxComment-len(truncated)] + truncated
}

// fitsComment reports whether an element's comment holds base whole. The
// API server's names (63 characters each) make bases of up to 196 bytes,
// so a port whose base does not fit is never one whose only name in the
// table is a comment: it gets a chain of its own (whose name holds 240
// bytes) where a shorter one would share one, and its no-endpoint
// elements go to a chain of its own too (prefixUnserved).
func fitsComment(base string) bool { return len(base) <= maxComment }

// endpointBase is the base of an endpoint's chain and affinity set: the
// port's base, then the endpoint's address with ':' (IPv6) spelled '.'.
func endpointBase(portBase string, ep netip.AddrPort) string {
	return portBase + "__" + strings.ReplaceAll(ep.Addr().String(), ":", ".") + "/" + strconv.Itoa(int(ep.Port()))
}

// Endpoint maps. A service port's endpoints live in one of shardCount
// named maps of its protocol, keyed by numgen value: slot s of a shard
// holds the keys s<<slotBits up to s<<slotBits + maxEndpoints - 1, and the
// port's rule is "numgen random mod N offset s<<slotBits map @dnat-tcp-xxx".
// An anonymous map per port would be simpler, but the kernel names and
// finds anonymous sets by walking every set of the table, which makes
// loading thousands of them quadratic; and a single named map holding
// every endpoint makes the kernel's hash insertions quadratic within one
// transaction. A thousand shards keep both small at 100,000 services.
// The maps are per protocol because nft refuses a map typed by "th dport"
// in a rule matching a protocol once the map is in the kernel.
const (
	prefixDNAT   = "dnat-"
	shardCount   = 1024
	slotBits     = 16
	maxEndpoints = 1 << slotBits
)

// mapCount is the number of endpoint maps of all protocols: shard i is of
// protocol shardProto(i).
const mapCount = 3 * shardCount

func shardProto(i int) string {
	return [...]string{"tcp", "udp", "sctp"}[i/shardCount]
}

// protoIndex is the index of a protocol's first shard over shardCount,
// -1 for a protocol without endpoint maps.
func protoIndex(proto string) int {
	switch proto {
	case "tcp":
		return 0
	case "udp":
		return 1
	case "sctp":
		return 2
	}
	return -1
}

// shardOf is the endpoint map of a chain of protocol proto, by an FNV-1a
// hash of its name; ok is false for a protocol without endpoint maps.
func shardOf(chain, proto string) (shard int, ok bool) {
	p := protoIndex(proto)
	if p < 0 {
		return 0, false
	}
	h := uint32(2166136261)
	for i := 0; i < len(chain); i++ {
		h = (h ^ uint32(chain[i])) * 16777619
	}
	return p*shardCount + int(h%shardCount), true
}

// shardName is the name of endpoint map i: "dnat-<protocol>-<3 hex digits>".
func shardName(i int) string { return shardNames[i] }

// shardNames are the names of the endpoint maps, made once: a full sync
// names each map and each of its chains' elements.
var shardNames = func() (names [mapCount]string) {
	const hex = "0123456789abcdef"
	for i := range names {
		n := i % shardCount
		names[i] = prefixDNAT + shardProto(i) + "-" + string([]byte{hex[n>>8&0xf], hex[n>>4&0xf], hex[n&0xf]})
	}
	return names
}()

// shardIndex is the endpoint map a name is of; ok is false when it is
// none's.
func shardIndex(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefixDNAT)
	proto, num, ok2 := strings.Cut(rest, "-")
	p := protoIndex(proto)
	if !ok || !ok2 || p < 0 || len(num) != 3 {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 16, 16)
	if err != nil || n >= shardCount || shardName(p*shardCount+int(n)) != name {
		return 0, false
	}
	return p*shardCount + int(n), true
}

// Shared endpoint maps. A simple service port (a ClusterIP without
// external destinations, node ports, affinity or a Local policy) has no
// chain of its own: its service-ips element goes to a chain shared by
// every simple port of its protocol, endpoint map and endpoint count N,
// whose one rule is "dnat ip addr . port to ip daddr . tcp dport . numgen
// random mod N map @cluster-endpoints-tcp-xx", and its endpoints are the
// elements "<cluster IP> . <port> . <index>" of that map. Every nftables
// commit visits every chain of the table, so a chain per port would cost
// every commit time in proportion to the services. The maps are sharded
// by destination, as one map holding every endpoint makes the kernel's
// insertions into it grow faster than its size within one transaction.
const (
	prefixSharedMap   = "cluster-endpoints-"
	prefixSharedChain = "cluster-dnat-"
	sharedShards      = 64
	sharedMapCount    = 3 * sharedShards
)

// sharedShard is the shared endpoint map of destination dest ("<cluster
// IP> . <port>") of protocol proto, by an FNV-1a hash of dest; ok is
// false for a protocol without endpoint maps.
func sharedShard(dest, proto string) (int, bool) {
	p := protoIndex(proto)
	if p < 0 {
		return 0, false
	}
	h := uint32(2166136261)
	for i := 0; i < len(dest); i++ {
		h = (h ^ uint32(dest[i])) * 16777619
	}
	return p*sharedShards + int(h%sharedShards), true
}

func sharedProto(i int) string { return shardProto(i / sharedShards * shardCount) }

// sharedMapName is the name of shared map i: "cluster-endpoints-<protocol>-<2 hex digits>".
func sharedMapName(i int) string { return sharedMapNames[i] }

// sharedMapNames are the names of the shared maps, made once, as
// shardNames: a full sync names a map for each simple port's elements.
var sharedMapNames = func() (names [sharedMapCount]string) {
	const hex = "0123456789abcdef"
	for i := range names {
		n := i % sharedShards
		names[i] = prefixSharedMap + sharedProto(i) + "-" + string([]byte{hex[n>>4&0xf], hex[n&0xf]})
	}
	return names
}()

// sharedChainName is the chain choosing among n endpoints in shared map i:
// "cluster-dnat-<protocol>-<2 hex digits>-<n>".
func sharedChainName(i, n int) string {
	return prefixSharedChain + sharedMapName(i)[len(prefixSharedMap):] + "-" + strconv.Itoa(n)
}

// sharedIndex is the shared map a name is of; ok is false when it is
// none's.
func sharedIndex(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefixSharedMap)
	proto, num, ok2 := strings.Cut(rest, "-")
	p := protoIndex(proto)
	if !ok || !ok2 || p < 0 || len(num) != 2 {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 16, 8)
	if err != nil || n >= sharedShards || sharedMapName(p*sharedShards+int(n)) != name {
		return 0, false
	}
	return p*sharedShards + int(n), true
}

// isSharedChain reports whether a chain of the table is a shared one.
func isSharedChain(name string) bool { return strings.HasPrefix(name, prefixSharedChain) }
