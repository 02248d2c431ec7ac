package nftnl

import (
	"strconv"

	"sigs.k8s.io/knftables"
)

// Verb is what an Op does to its object, as the nft command of that name.
type Verb uint8

const (
	// Add creates the object, or does nothing when it exists.
	Add Verb = iota
	// Flush empties a chain of its rules or a set or map of its elements.
	Flush
	// Delete removes the object; it must exist.
	Delete
)

// Op is one operation of a transaction: Verb on Obj or, when Obj is nil,
// on each of Elems.
type Op struct {
	Verb  Verb
	Obj   knftables.Object
	Elems *Elements
}

// Elements are elements of one set or map given together: one Op where a
// knftables.Element each would take one Op, a struct and its slices,
// which a cold sync writes by the hundred thousand. Their keys are Keys
// or, when Keys is nil, the numbers from First up (numgen values, as an
// endpoint map's), each after Prefix and " . " when Prefix is set (a map
// keyed by a concatenation that ends in a numgen value). They are added or
// deleted.
type Elements struct {
	// Set is the set's or map's name.
	Set   string
	First uint32
	// Prefix is the fields every key has before its number (with Keys
	// nil), as nft text: encoded once for all the elements.
	Prefix string
	// Keys, Values (a map's) and Comments (none, or one per element, ""
	// for none) are the elements' as nft text.
	Keys, Values, Comments []string
}

// Len is the number of elements.
func (e *Elements) Len() int {
	if e.Keys != nil {
		return len(e.Keys)
	}
	return len(e.Values)
}

func (e *Elements) key(i int) string {
	if e.Keys != nil {
		return e.Keys[i]
	}
	n := strconv.FormatUint(uint64(e.First)+uint64(i), 10)
	if e.Prefix != "" {
		return e.Prefix + " . " + n
	}
	return n
}

// Element is element i of e.
func (e *Elements) Element(i int) *knftables.Element {
	el := &knftables.Element{Key: []string{e.key(i)}}
	if e.Values != nil {
		el.Map = e.Set
		if i < len(e.Values) {
			el.Value = []string{e.Values[i]}
		}
	} else {
		el.Set = e.Set
	}
	if i < len(e.Comments) && e.Comments[i] != "" {
		el.Comment = &e.Comments[i]
	}
	return el
}

// Slice is elements i to j of e.
func (e *Elements) Slice(i, j int) *Elements {
	s := &Elements{Set: e.Set, First: e.First + uint32(i), Prefix: e.Prefix}
	sub := func(l []string) []string {
		if l == nil {
			return nil
		}
		return l[i:j:j]
	}
	s.Keys, s.Values, s.Comments = sub(e.Keys), sub(e.Values), sub(e.Comments)
	return s
}

// Count is the number of operations o stands for: one, or one per
// element of Elems.
func (o Op) Count() int {
	if o.Obj == nil && o.Elems != nil {
		return o.Elems.Len()
	}
	return 1
}

// AddTo adds o to tx, the text form of the same operation.
func (o Op) AddTo(tx *knftables.Transaction) {
	if o.Obj == nil && o.Elems != nil {
		for i := range o.Elems.Len() {
			Op{Verb: o.Verb, Obj: o.Elems.Element(i)}.AddTo(tx)
		}
		return
	}
	switch o.Verb {
	case Add:
		tx.Add(o.Obj)
	case Flush:
		tx.Flush(o.Obj)
	case Delete:
		tx.Delete(o.Obj)
	}
}
