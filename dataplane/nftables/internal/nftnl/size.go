package nftnl

import (
	"strings"

	"sigs.k8s.io/knftables"
)

// batchSize estimates the encoded size of ops from above, so that the
// buffer of a large batch is allocated once and never copied, and the
// number of its messages: one per op but elements, which go a thousand
// or so to a message. A field of an element takes at most the bytes of
// its text, padded, but for an IPv6 address (ipv6), which takes 16 for
// as few as 2 characters.
func batchSize(ops []Op, ipv6 bool) (n, msgs int) {
	n = 256
	elems := 0
	for _, op := range ops {
		size, e, m := opSize(op, ipv6)
		n, elems, msgs = n+size, elems+e, msgs+m
	}
	return n, msgs + elems/512 + 16
}

// opSize is batchSize's estimate of op: its bytes, its elements, and the
// messages it takes beside its elements' (1 or 0).
func opSize(op Op, ipv6 bool) (n, elems, msgs int) {
	extra := 0
	if ipv6 {
		extra = 16
	}
	if e := op.Elems; op.Obj == nil && e != nil {
		if e.Keys == nil {
			// Headers and a 4-byte key after the prefix's fields,
			// then the value.
			pre := 0
			if e.Prefix != "" {
				pre = len(e.Prefix) + 8 + extra
			}
			for _, v := range e.Values {
				n += 24 + pre + len(v) + extra
			}
			return n, e.Len(), 0
		}
		for i, k := range e.Keys {
			n += elemSize(k, e.Values, e.Comments, i, extra)
		}
		return n, e.Len(), 0
	}
	switch o := op.Obj.(type) {
	case *knftables.Element:
		var comments []string
		if o.Comment != nil {
			comments = []string{*o.Comment}
		}
		return elemSize(strings.Join(o.Key, " . "), o.Value, comments, 0, extra), 1, 0
	case *knftables.Rule:
		n = 128 + len(o.Chain) + 3*len(o.Rule)
		if o.Comment != nil {
			n += 12 + len(*o.Comment)
		}
	case *knftables.Chain:
		n = 64 + len(o.Name)
		if o.Comment != nil {
			n += 12 + len(*o.Comment)
		}
		if o.Type != nil {
			n += 64
		}
	default:
		n = 512
	}
	return n, 0, 1
}

// elemSize bounds the encoded size of an element of key text key and
// values[i] and comments[i], if any.
func elemSize(key string, values, comments []string, i, extra int) int {
	n := 16 + max(len(key), 4) + extra
	if i < len(values) {
		if v := values[i]; v != "" && (v[0] == 'g' || v[0] == 'j' || v[0] == 'd' || v[0] == 'a') {
			// A verdict: its chain's name and headers.
			n += 28 + len(v)
		} else {
			n += 8 + max(len(v), 8) + extra
		}
	}
	if i < len(comments) && comments[i] != "" {
		n += 12 + len(comments[i])
	}
	return n
}
