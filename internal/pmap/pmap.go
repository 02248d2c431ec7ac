package pmap

import (
	"hash/maphash"
	"iter"
	"math/bits"
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
	root, added := m.root.set(hashOf(k), 0, k, v)
	if added {
		m.n++
	}
	m.root = root
	return m
}

// Delete returns a map without k. Deleting an absent key returns m itself.
func (m Map[K, V]) Delete(k K) Map[K, V] {
	root, removed := m.root.delete(hashOf(k), 0, k)
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

func (n *node[K, V]) set(h uint64, shift uint, k K, v V) (*node[K, V], bool) {
	if n == nil {
		n = &node[K, V]{}
	}
	if shift >= hashBits {
		for i := range n.entries {
			if n.entries[i].key == k {
				c := n.clone(0)
				c.entries[i].val = v
				return c, false
			}
		}
		c := n.clone(1)
		c.entries = append(c.entries, entry[K, V]{hash: h, key: k, val: v})
		return c, true
	}
	bit := uint32(1) << ((h >> shift) & fanoutMask)
	pos := bits.OnesCount32(n.bitmap & (bit - 1))
	if n.bitmap&bit == 0 {
		c := &node[K, V]{bitmap: n.bitmap | bit, entries: make([]entry[K, V], len(n.entries)+1)}
		copy(c.entries, n.entries[:pos])
		c.entries[pos] = entry[K, V]{hash: h, key: k, val: v}
		copy(c.entries[pos+1:], n.entries[pos:])
		return c, true
	}
	e := n.entries[pos]
	c := n.clone(0)
	switch {
	case e.child != nil:
		child, added := e.child.set(h, shift+fanoutBits, k, v)
		c.entries[pos] = entry[K, V]{child: child}
		return c, added
	case e.hash == h && e.key == k:
		c.entries[pos].val = v
		return c, false
	default:
		child, _ := (*node[K, V])(nil).set(e.hash, shift+fanoutBits, e.key, e.val)
		child, _ = child.set(h, shift+fanoutBits, k, v)
		c.entries[pos] = entry[K, V]{child: child}
		return c, true
	}
}

func (n *node[K, V]) delete(h uint64, shift uint, k K) (*node[K, V], bool) {
	if n == nil {
		return nil, false
	}
	if shift >= hashBits {
		for i := range n.entries {
			if n.entries[i].key == k {
				return n.without(i, 0), true
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
		return n.without(pos, bit), true
	}
	child, removed := e.child.delete(h, shift+fanoutBits, k)
	if !removed {
		return n, false
	}
	if child == nil {
		return n.without(pos, bit), true
	}
	c := n.clone(0)
	if len(child.entries) == 1 && child.entries[0].child == nil {
		// A lone leaf moves up so that lookups stay short and an emptied
		// subtree never lingers.
		c.entries[pos] = child.entries[0]
	} else {
		c.entries[pos] = entry[K, V]{child: child}
	}
	return c, true
}

// without returns a copy of n lacking entries[i]; bit is cleared from the
// bitmap (0 for collision buckets). An emptied node becomes nil.
func (n *node[K, V]) without(i int, bit uint32) *node[K, V] {
	if len(n.entries) == 1 {
		return nil
	}
	c := &node[K, V]{bitmap: n.bitmap &^ bit, entries: make([]entry[K, V], 0, len(n.entries)-1)}
	c.entries = append(c.entries, n.entries[:i]...)
	c.entries = append(c.entries, n.entries[i+1:]...)
	return c
}

func (n *node[K, V]) clone(extra int) *node[K, V] {
	c := &node[K, V]{bitmap: n.bitmap, entries: make([]entry[K, V], len(n.entries), len(n.entries)+extra)}
	copy(c.entries, n.entries)
	return c
}
