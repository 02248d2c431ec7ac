package endpoints

import (
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSliceSet: a sliceSet holds what a map would through any sequence of
// sets and deletes, its first slice without one.
func TestSliceSet(t *testing.T) {
	a, b, c := &parsedSlice{}, &parsedSlice{}, &parsedSlice{}
	type step struct {
		set  string
		ps   *parsedSlice
		del  string
		want map[string]*parsedSlice
	}
	steps := []step{
		{set: "a", ps: a, want: map[string]*parsedSlice{"a": a}},
		{set: "a", ps: b, want: map[string]*parsedSlice{"a": b}},
		{set: "b", ps: b, want: map[string]*parsedSlice{"a": b, "b": b}},
		{set: "c", ps: c, want: map[string]*parsedSlice{"a": b, "b": b, "c": c}},
		{del: "a", want: map[string]*parsedSlice{"b": b, "c": c}},
		{del: "x", want: map[string]*parsedSlice{"b": b, "c": c}},
		{set: "c", ps: a, want: map[string]*parsedSlice{"b": b, "c": a}},
		{del: "b", want: map[string]*parsedSlice{"c": a}},
		{del: "c", want: map[string]*parsedSlice{}},
		{set: "d", ps: c, want: map[string]*parsedSlice{"d": c}},
	}
	var s sliceSet
	for i, st := range steps {
		if st.ps != nil {
			s.set(st.set, st.ps)
		} else {
			s.delete(st.del)
		}
		got := maps.Collect(s.all())
		if d := cmp.Diff(st.want, got, cmp.Comparer(func(x, y *parsedSlice) bool { return x == y })); d != "" {
			t.Errorf("step %d: slices (-want +got):\n%s", i, d)
		}
		if s.len() != len(st.want) {
			t.Errorf("step %d: len %d, want %d", i, s.len(), len(st.want))
		}
		for name, ps := range st.want {
			if s.get(name) != ps {
				t.Errorf("step %d: get(%q) is not the slice set", i, name)
			}
		}
		if s.get("x") != nil {
			t.Errorf("step %d: get of a missing name is not nil", i)
		}
	}
}
