package nftables

import (
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

// dnatDef is a chain's endpoint choice through an endpoint map: its
// endpoints ("addr . port", in key order) at a slot of its shard.
type dnatDef struct {
	proto string
	eps   []string
	shard int
	// slot is -1 until the chain is placed.
	slot int32
}

// offset is the first numgen value of the chain's slot.
func (n *dnatDef) offset() int64 { return int64(n.slot) << slotBits }

// key is the map key of endpoint i.
func (n *dnatDef) key(i int) string { return strconv.FormatInt(n.offset()+int64(i), 10) }

// slotTable says which slots of each shard are taken. A new chain takes
// the lowest free slot of its shard, so that placing the same chains in
// the same order always gives the same slots.
type slotTable struct {
	shards [mapCount]*shardSlots
}

type shardSlots struct {
	used map[int32]bool
	// free are the slots below next that are not used, ascending.
	free []int32
	next int32
}

func (t *slotTable) shard(i int) *shardSlots {
	if t.shards[i] == nil {
		t.shards[i] = &shardSlots{used: map[int32]bool{}}
	}
	return t.shards[i]
}

// take marks slot s of shard i used; false when it already is.
func (t *slotTable) take(i int, s int32) bool {
	sh := t.shard(i)
	if s < 0 || sh.used[s] {
		return false
	}
	sh.used[s] = true
	if s >= sh.next {
		for f := sh.next; f < s; f++ {
			sh.free = append(sh.free, f)
		}
		sh.next = s + 1
	} else if j, ok := slices.BinarySearch(sh.free, s); ok {
		sh.free = slices.Delete(sh.free, j, j+1)
	}
	return true
}

// alloc takes the lowest free slot of shard i.
func (t *slotTable) alloc(i int) int32 {
	sh := t.shard(i)
	s := sh.next
	if len(sh.free) > 0 {
		s = sh.free[0]
	}
	t.take(i, s)
	return s
}

// release frees slot s of shard i.
func (t *slotTable) release(i int, s int32) {
	sh := t.shard(i)
	if !sh.used[s] {
		return
	}
	delete(sh.used, s)
	j, _ := slices.BinarySearch(sh.free, s)
	sh.free = slices.Insert(sh.free, j, s)
}

// inUse reports whether any slot of shard i is used.
func (t *slotTable) inUse(i int) bool { return t.shards[i] != nil && len(t.shards[i].used) > 0 }

// appendElements appends v of the map elements of n's endpoints from up
// to to, which share their allocations: a cold start writes millions.
func appendElements(ops []op, v verb, n *dnatDef, from, to int) []op {
	elems := make([]knftables.Element, to-from)
	strs := make([]string, 2*(to-from))
	name := shardName(n.shard)
	for i := range elems {
		strs[2*i], strs[2*i+1] = n.key(from+i), n.eps[from+i]
		elems[i] = knftables.Element{Map: name, Key: strs[2*i : 2*i+1 : 2*i+1], Value: strs[2*i+1 : 2*i+2 : 2*i+2]}
		ops = append(ops, op{Verb: v, Obj: &elems[i]})
	}
	return ops
}

// allElements is the op of v of all the map elements of n's endpoints.
func allElements(v verb, n *dnatDef) op {
	return op{Verb: v, Elems: &nftnl.Elements{Set: shardName(n.shard), First: uint32(n.offset()), Values: n.eps}}
}

// shardMap is the endpoint map of shard i.
func (d *Dataplane) shardMap(i int) *knftables.Map {
	return &knftables.Map{Name: shardName(i), TypeOf: "numgen random mod 1 : " + d.ipX + " daddr . " + shardProto(i) + " dport",
		Comment: knftables.PtrTo("service endpoints by numgen value")}
}

// slotOfSig reads the slot a dnat chain's signature carries after its '@'.
func slotOfSig(sig string) (int32, bool) {
	_, s, ok := strings.Cut(sig, "@")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 32)
	// A slot's keys must fit numgen's 32 bits.
	return int32(n), err == nil && n >= 0 && n < 1<<(32-slotBits)
}
