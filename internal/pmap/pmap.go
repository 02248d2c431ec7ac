package pmap

import (
	"hash/maphash"
	"iter"
	"math/bits"
	"slices"
)

// seed is fixed for the life of the process so that every version of every
// Map hashes keys alike; it is never written after package initialisation.
var seed = maphash.MakeSeed()

const (
	fanoutBits = 5
	fanoutMask = 1<<fanoutBits - 1
	hashBits   = 64
)

// Map is an immutable map from K to V. The zero value is an empty map ready
// to use. Set and Delete return a new Map and leave the receiver unchanged, so
// a Map may be read from any number of goroutines while others derive new
// versions from it.
type Map[K comparable, V any] struct {
	root *node[K, V]
	n    int
}

type entry[K comparable, V any] struct {
	child *node[K, V] // non-nil: a subtree; the other fields are unused
	hash  uint64
	key   K
	val   V
}

// node is a bitmap-indexed branch. At depth hashBits/fanoutBits and below the
// hash is exhausted and the node is a collision bucket: bitmap is unused and
// entries are leaves with equal hashes, searched linearly.
type node[K comparable, V any] struct {
	bitmap  uint32
	entries []entry[K, V]
	// owner is the Txn that made the node and may still change it in
	// place; nil for nodes of a published Map.
	owner *token
}

// token identifies one Txn; it has a size so that every one is distinct.
type token struct{ _ byte }

// Txn applies a batch of changes to a Map. A node the Txn copied is its
// own until Map is called and is changed in place by later changes, so a
// batch of n changes copies each node at most once instead of once per
// change (the first sync of a large cluster sets every key). The Map the
// Txn started from never changes.
type Txn[K comparable, V any] struct {
	m     Map[K, V]
	owner *token
}

// Txn starts a batch of changes to m.
func (m Map[K, V]) Txn() *Txn[K, V] { return &Txn[K, V]{m: m, owner: &token{}} }

// Get returns the value stored for k, changes so far included.
func (t *Txn[K, V]) Get(k K) (V, bool) { return t.m.Get(k) }

// Set maps k to v.
func (t *Txn[K, V]) Set(k K, v V) {
	root, added := t.m.root.set(hashOf(k), 0, k, v, t.owner)
	if added {
		t.m.n++
	}
	t.m.root = root
}

// Delete removes k.
func (t *Txn[K, V]) Delete(k K) {
	root, removed := t.m.root.delete(hashOf(k), 0, k, t.owner)
	if removed {
		t.m.n--
		t.m.root = root
	}
}

// Map ends the batch and returns its result. The Txn must not be used
// afterwards: its nodes now belong to an immutable Map.
func (t *Txn[K, V]) Map() Map[K, V] {
	t.owner = nil
	return t.m
}

func hashOf[K comparable](k K) uint64 { return maphash.Comparable(seed, k) }

// Len returns the number of keys.
func (m Map[K, V]) Len() int { return m.n }

// Get returns the value stored for k.
func (m Map[K, V]) Get(k K) (V, bool) {
	h := hashOf(k)
	n := m.root
	for shift := uint(0); n != nil; shift += fanoutBits {
		if shift >= hashBits {
			for i := range n.entries {
				if n.entries[i].key == k {
					return n.entries[i].val, true
				}
			}
			break
		}
		bit := uint32(1) << ((h >> shift) & fanoutMask)
		if n.bitmap&bit == 0 {
			break
		}
		e := &n.entries[bits.OnesCount32(n.bitmap&(bit-1))]
		if e.child != nil {
			n = e.child
			continue
		}
		if e.hash == h && e.key == k {
			return e.val, true
		}
		break
	}
	var zero V
	return zero, false
}

// Set returns a map in which k maps to v.
func (m Map[K, V]) Set(k K, v V) Map[K, V] {
	root, added := m.root.set(hashOf(k), 0, k, v, nil)
	if added {
		m.n++
	}
	m.root = root
	return m
}

// Delete returns a map without k. Deleting an absent key returns m itself.
func (m Map[K, V]) Delete(k K) Map[K, V] {
	root, removed := m.root.delete(hashOf(k), 0, k, nil)
	if removed {
		m.n--
		m.root = root
	}
	return m
}

// All yields every key and value once, in an order that depends on the hash
// seed and is therefore not stable across processes.
func (m Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) { m.root.each(yield) }
}

func (n *node[K, V]) each(yield func(K, V) bool) bool {
	if n == nil {
		return true
	}
	for i := range n.entries {
		e := &n.entries[i]
		if e.child != nil {
			if !e.child.each(yield) {
				return false
			}
		} else if !yield(e.key, e.val) {
			return false
		}
	}
	return true
}

// set returns n with k mapped to v; nodes owned by owner (never nil
// ones) are changed in place, others are copied and the copies owned.
func (n *node[K, V]) set(h uint64, shift uint, k K, v V, owner *token) (*node[K, V], bool) {
	if n == nil {
		c := &node[K, V]{entries: []entry[K, V]{{hash: h, key: k, val: v}}, owner: owner}
		if shift < hashBits {
			c.bitmap = 1 << ((h >> shift) & fanoutMask)
		}
		return c, true
	}
	if shift >= hashBits {
		for i := range n.entries {
			if n.entries[i].key == k {
				c := n.mutable(owner, 0)
				c.entries[i].val = v
				return c, false
			}
		}
		c := n.mutable(owner, 1)
		c.entries = append(c.entries, entry[K, V]{hash: h, key: k, val: v})
		return c, true
	}
	bit := uint32(1) << ((h >> shift) & fanoutMask)
	pos := bits.OnesCount32(n.bitmap & (bit - 1))
	if n.bitmap&bit == 0 {
		c := n.mutable(owner, 1)
		c.bitmap |= bit
		c.entries = slices.Insert(c.entries, pos, entry[K, V]{hash: h, key: k, val: v})
		return c, true
	}
	e := n.entries[pos]
	c := n.mutable(owner, 0)
	switch {
	case e.child != nil:
		child, added := e.child.set(h, shift+fanoutBits, k, v, owner)
		c.entries[pos] = entry[K, V]{child: child}
		return c, added
	case e.hash == h && e.key == k:
		c.entries[pos].val = v
		return c, false
	default:
		child, _ := (*node[K, V])(nil).set(e.hash, shift+fanoutBits, e.key, e.val, owner)
		child, _ = child.set(h, shift+fanoutBits, k, v, owner)
		c.entries[pos] = entry[K, V]{child: child}
		return c, true
	}
}

func (n *node[K, V]) delete(h uint64, shift uint, k K, owner *token) (*node[K, V], bool) {
	if n == nil {
		return nil, false
	}
	if shift >= hashBits {
		for i := range n.entries {
			if n.entries[i].key == k {
				return n.without(i, 0, owner), true
			}
		}
		return n, false
	}
	bit := uint32(1) << ((h >> shift) & fanoutMask)
	if n.bitmap&bit == 0 {
		return n, false
	}
	pos := bits.OnesCount32(n.bitmap & (bit - 1))
	e := n.entries[pos]
	if e.child == nil {
		if e.hash != h || e.key != k {
			return n, false
		}
		return n.without(pos, bit, owner), true
	}
	child, removed := e.child.delete(h, shift+fanoutBits, k, owner)
	if !removed {
		return n, false
	}
	if child == nil {
		return n.without(pos, bit, owner), true
	}
	c := n.mutable(owner, 0)
	if len(child.entries) == 1 && child.entries[0].child == nil {
		// A lone leaf moves up so that lookups stay short and an emptied
		// subtree never lingers.
		c.entries[pos] = child.entries[0]
	} else {
		c.entries[pos] = entry[K, V]{child: child}
	}
	return c, true
}

// without returns n lacking entries[i] (a copy unless owner owns n); bit
// is cleared from the bitmap (0 for collision buckets). An emptied node
// becomes nil.
func (n *node[K, V]) without(i int, bit uint32, owner *token) *node[K, V] {
	if len(n.entries) == 1 {
		return nil
	}
	if owner != nil && n.owner == owner {
		n.bitmap &^= bit
		n.entries = slices.Delete(n.entries, i, i+1)
		return n
	}
	c := &node[K, V]{bitmap: n.bitmap &^ bit, entries: make([]entry[K, V], 0, len(n.entries)-1), owner: owner}
	c.entries = append(c.entries, n.entries[:i]...)
	c.entries = append(c.entries, n.entries[i+1:]...)
	return c
}

// mutable returns n itself if owner owns it, else a copy that owner owns,
// with room for extra entries.
func (n *node[K, V]) mutable(owner *token, extra int) *node[K, V] {
	if owner != nil && n.owner == owner {
		return n
	}
	c := &node[K, V]{bitmap: n.bitmap, entries: make([]entry[K, V], len(n.entries), len(n.entries)+extra), owner: owner}
	copy(c.entries, n.entries)
	return c
}
