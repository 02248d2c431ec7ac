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

// Elements are elements of one map whose keys are consecutive numbers
// (numgen values, as an endpoint map's), given together: one Op where a
// knftables.Element each would take len(Values), which a cold sync
// writes by the hundred thousand. They are added or deleted.
type Elements struct {
	Map string
	// First is the key of Values[0], First+1 the next one's, and so on.
	First uint32
	// Values are the elements' values as nft text.
	Values []string
}

// Element is element i of e.
func (e *Elements) Element(i int) *knftables.Element {
	return &knftables.Element{Map: e.Map, Key: []string{strconv.FormatUint(uint64(e.First)+uint64(i), 10)}, Value: []string{e.Values[i]}}
}

// Count is the number of operations o stands for: one, or one per
// element of Elems.
func (o Op) Count() int {
	if o.Obj == nil && o.Elems != nil {
		return len(o.Elems.Values)
	}
	return 1
}

// AddTo adds o to tx, the text form of the same operation.
func (o Op) AddTo(tx *knftables.Transaction) {
	if o.Obj == nil && o.Elems != nil {
		for i := range o.Elems.Values {
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
