package endpoints

import "iter"

// sliceSet is the parsed slices of one service by name. Most services
// have one slice, which it holds without a map: a cold start tracks tens
// of thousands.
type sliceSet struct {
	// name and one are a slice, when one is not nil; more the others.
	name string
	one  *parsedSlice
	more map[string]*parsedSlice
}

// get returns slice name, nil when there is none.
func (s *sliceSet) get(name string) *parsedSlice {
	if s.one != nil && s.name == name {
		return s.one
	}
	return s.more[name]
}

// set stores ps as slice name.
func (s *sliceSet) set(name string, ps *parsedSlice) {
	if s.one == nil || s.name == name {
		s.name, s.one = name, ps
		return
	}
	if s.more == nil {
		s.more = map[string]*parsedSlice{}
	}
	s.more[name] = ps
}

// delete removes slice name.
func (s *sliceSet) delete(name string) {
	if s.one == nil || s.name != name {
		delete(s.more, name)
		return
	}
	s.name, s.one = "", nil
	for n, ps := range s.more {
		s.name, s.one = n, ps
		delete(s.more, n)
		break
	}
}

// len returns the number of slices.
func (s *sliceSet) len() int {
	n := len(s.more)
	if s.one != nil {
		n++
	}
	return n
}

// all yields every slice, in no particular order.
func (s *sliceSet) all() iter.Seq2[string, *parsedSlice] {
	return func(yield func(string, *parsedSlice) bool) {
		if s.one != nil && !yield(s.name, s.one) {
			return
		}
		for n, ps := range s.more {
			if !yield(n, ps) {
				return
			}
		}
	}
}
