package nftnl

import "sigs.k8s.io/knftables"

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

// Op is one operation of a transaction.
type Op struct {
	Verb Verb
	Obj  knftables.Object
}

// AddTo adds o to tx, the text form of the same operation.
func (o Op) AddTo(tx *knftables.Transaction) {
	switch o.Verb {
	case Add:
		tx.Add(o.Obj)
	case Flush:
		tx.Flush(o.Obj)
	case Delete:
		tx.Delete(o.Obj)
	}
}
