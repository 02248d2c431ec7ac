package nftables

import (
	"strconv"

	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

// sharedDef is a simple port's endpoints in a shared endpoint map: the
// elements "dest . i : eps[i]" of map shard, reached through the shared
// chain of its endpoint count. It rides on the port's service-ips claim,
// so that of several ports claiming one destination the winner's
// endpoints are the ones written.
type sharedDef struct {
	shard int
	// dest is "<cluster IP> . <port>", the elements' key before the index.
	dest string
	// eps are the endpoints ("addr . port"), in key order.
	eps []string
}

// key is the map key of endpoint i.
func (s *sharedDef) key(i int) string { return s.dest + " . " + strconv.Itoa(i) }

// chain is the shared chain the port's service-ips element goes to.
func (s *sharedDef) chain() string { return sharedChainName(s.shard, len(s.eps)) }

// sameShared reports whether a and b (either nil) hold the same elements.
func sameShared(a, b *sharedDef) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.shard != b.shard || a.dest != b.dest || len(a.eps) != len(b.eps) {
		return false
	}
	for i := range a.eps {
		if a.eps[i] != b.eps[i] {
			return false
		}
	}
	return true
}

// sharedChanges appends to dels and adds the shared map elements that
// change when a destination's endpoints go from old to new (either nil:
// none): only the indexes whose endpoint differs.
func sharedChanges(dels, adds []op, old, new *sharedDef) ([]op, []op) {
	var n int
	if old != nil {
		n = len(old.eps)
	}
	if new != nil {
		n = max(n, len(new.eps))
	}
	for i := range n {
		var was, is string
		if old != nil && i < len(old.eps) {
			was = old.eps[i]
		}
		if new != nil && i < len(new.eps) {
			is = new.eps[i]
		}
		if was == is {
			continue
		}
		if was != "" {
			dels = append(dels, sharedElement(verbDelete, old, i))
		}
		if is != "" {
			adds = append(adds, sharedElement(verbAdd, new, i))
		}
	}
	return dels, adds
}

func sharedElement(v verb, s *sharedDef, i int) op {
	return op{Verb: v, Obj: &knftables.Element{Map: sharedMapName(s.shard), Key: []string{s.key(i)}, Value: []string{s.eps[i]}}}
}

// allShared is the op of v of all the map elements of s's endpoints, their
// keys numbered after the destination: a cold start writes millions, and
// the destination's fields are encoded once for them all.
func allShared(v verb, s *sharedDef) op {
	return op{Verb: v, Elems: &nftnl.Elements{Set: sharedMapName(s.shard), Prefix: s.dest, Values: s.eps}}
}

// sharedKey names a shared chain: its map and endpoint count.
type sharedKey struct{ shard, n int }

// users is the key of the shared chain s goes to.
func (s *sharedDef) users() sharedKey { return sharedKey{s.shard, len(s.eps)} }

// sharedMap is shared endpoint map i.
func (d *Dataplane) sharedMap(i int) *knftables.Map {
	field := d.ipX + " daddr . " + sharedProto(i) + " dport"
	return &knftables.Map{Name: sharedMapName(i), TypeOf: field + " . numgen random mod 1 : " + field,
		Comment: knftables.PtrTo("ClusterIP endpoints by destination and numgen value")}
}

// sharedChain is the chain choosing among n endpoints in shared map i.
func (d *Dataplane) sharedChain(i, n int) chainDef {
	return newChain(sharedChainName(i, n), []string{"dnat " + d.ipX + " addr . port to " + d.ipX + " daddr . " + sharedProto(i) +
		" dport . numgen random mod " + strconv.Itoa(n) + " map @" + sharedMapName(i)})
}

// sharedChainOf parses a shared chain's name into its map and endpoint
// count; ok is false for any other name.
func sharedChainOf(name string) (shard, n int, ok bool) {
	if !isSharedChain(name) {
		return 0, 0, false
	}
	rest := name[len(prefixSharedChain):]
	// "<protocol>-<2 hex digits>-<n>"
	j := len(rest) - 1
	for j >= 0 && rest[j] != '-' {
		j--
	}
	if j < 0 {
		return 0, 0, false
	}
	shard, ok = sharedIndex(prefixSharedMap + rest[:j])
	n, err := strconv.Atoi(rest[j+1:])
	if !ok || err != nil || n <= 0 || n > maxEndpoints || sharedChainName(shard, n) != name {
		return 0, 0, false
	}
	return shard, n, true
}
