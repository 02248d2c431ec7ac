package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"strings"
)

// maxChainName is the longest chain name the kernel accepts
// (XT_EXTENSION_MAXNAMELEN less the terminating NUL).
const maxChainName = 28

// DefaultChainPrefix is the prefix of every chain the dataplane owns when
// Config.ChainPrefix is empty. It differs from kube-proxy's "KUBE-" so that
// proxykit and kube-proxy can run side by side without clobbering each other.
const DefaultChainPrefix = "PK-"

// The kinds of per-service chain, each a fixed infix after the prefix.
const (
	kindSVC = "SVC-"
	kindSVL = "SVL-"
	kindEXT = "EXT-"
	kindFW  = "FW-"
	kindSEP = "SEP-"
)

var serviceChainKinds = []string{kindSVC, kindSVL, kindEXT, kindFW, kindSEP}

// chainNames holds the names of the fixed chains for one prefix.
type chainNames struct {
	prefix string
	// hashLen is how many hash characters fit after prefix and kind.
	hashLen int

	services, externalServices, nodePorts, postrouting, markMasq string
	forward, proxyFirewall, firewall                             string
	// canary is an otherwise unused chain in each table whose loss tells
	// that someone flushed or replaced the table (KernelChanged).
	canary string
}

// longestStatic is the longest fixed-chain suffix; it bounds the prefix.
const longestStatic = "EXTERNAL-SERVICES"

// minHashLen keeps per-service chain names collision-resistant enough:
// 10 base32 characters are 50 bits.
const minHashLen = 10

func newChainNames(prefix string) (chainNames, error) {
	if prefix == "" {
		prefix = DefaultChainPrefix
	}
	if err := validPrefix(prefix); err != nil {
		return chainNames{}, err
	}
	hashLen := min(16, maxChainName-len(prefix)-len(kindSVC))
	return chainNames{
		prefix:           prefix,
		hashLen:          hashLen,
		services:         prefix + "SERVICES",
		externalServices: prefix + "EXTERNAL-SERVICES",
		nodePorts:        prefix + "NODEPORTS",
		postrouting:      prefix + "POSTROUTING",
		markMasq:         prefix + "MARK-MASQ",
		forward:          prefix + "FORWARD",
		proxyFirewall:    prefix + "PROXY-FIREWALL",
		firewall:         prefix + "FIREWALL",
		canary:           prefix + "PROXY-CANARY",
	}, nil
}

func validPrefix(p string) error {
	if len(p)+len(longestStatic) > maxChainName || maxChainName-len(p)-len(kindSVC) < minHashLen {
		return fmt.Errorf("chain prefix %q is too long: at most %d characters", p, maxChainName-len(longestStatic))
	}
	for _, c := range p {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("chain prefix %q: only A-Z, 0-9, '-' and '_' are allowed", p)
		}
	}
	if p == "KUBE-" {
		return fmt.Errorf("chain prefix %q would share chains with kube-proxy", p)
	}
	return nil
}

// appendHash appends the first n characters of the hash of data to b.
func appendHash(b []byte, n int, data []byte) []byte {
	sum := sha256.Sum256(data)
	// Ten bytes are exactly sixteen base32 characters, the most a name
	// uses, and encode like the start of the whole digest.
	var buf [16]byte
	base32.StdEncoding.Encode(buf[:], sum[:10])
	return append(b, buf[:n]...)
}

// chainName is prefix, kind and the hash of data, made in one allocation:
// a chain name is hashed for every endpoint of a full rendering.
func (c chainNames) chainName(kind string, data []byte) string {
	var buf [64]byte
	b := append(append(buf[:0], c.prefix...), kind...)
	return string(appendHash(b, c.hashLen, data))
}

// serviceChain names a per-service-port chain of kind; portID is
// "ns/name:port" + lowercase protocol, upstream's hash input.
func (c chainNames) serviceChain(kind, portID string) string {
	var in [256]byte
	return c.chainName(kind, append(in[:0], portID...))
}

// endpointChain names the chain of one endpoint of one service port.
func (c chainNames) endpointChain(portID, endpoint string) string {
	var in [256]byte
	return c.chainName(kindSEP, append(append(in[:0], portID...), endpoint...))
}

// appendEndpointChain appends endpointChain(portID, ep.String()) to b
// without making either string: a full rendering names every endpoint.
func (c chainNames) appendEndpointChain(b []byte, portID string, ep netip.AddrPort) []byte {
	var in [256]byte
	b = append(append(b, c.prefix...), kindSEP...)
	return appendHash(b, c.hashLen, ep.AppendTo(append(in[:0], portID...)))
}

// isServiceChain reports whether name is a per-service chain of this
// prefix: the only chains garbage-collected when nothing refers to them.
func (c chainNames) isServiceChain(name string) bool {
	rest, ok := strings.CutPrefix(name, c.prefix)
	if !ok {
		return false
	}
	for _, k := range serviceChainKinds {
		if h, ok := strings.CutPrefix(rest, k); ok && len(h) == c.hashLen {
			return true
		}
	}
	return false
}
