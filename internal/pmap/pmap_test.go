package pmap

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func contents[K comparable, V any](m Map[K, V]) map[K]V {
	out := map[K]V{}
	for k, v := range m.All() {
		out[k] = v
	}
	return out
}

func TestOperations(t *testing.T) {
	type op struct {
		del bool
		k   string
		v   int
	}
	cases := []struct {
		name string
		ops  []op
		want map[string]int
	}{
		{name: "empty", want: map[string]int{}},
		{name: "set", ops: []op{{k: "a", v: 1}, {k: "b", v: 2}}, want: map[string]int{"a": 1, "b": 2}},
		{name: "overwrite", ops: []op{{k: "a", v: 1}, {k: "a", v: 3}}, want: map[string]int{"a": 3}},
		{name: "delete", ops: []op{{k: "a", v: 1}, {k: "b", v: 2}, {del: true, k: "a"}}, want: map[string]int{"b": 2}},
		{name: "delete absent", ops: []op{{k: "a", v: 1}, {del: true, k: "z"}}, want: map[string]int{"a": 1}},
		{name: "delete all", ops: []op{{k: "a", v: 1}, {del: true, k: "a"}}, want: map[string]int{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var m Map[string, int]
			for _, o := range tc.ops {
				if o.del {
					m = m.Delete(o.k)
				} else {
					m = m.Set(o.k, o.v)
				}
			}
			if diff := cmp.Diff(tc.want, contents(m)); diff != "" {
				t.Errorf("contents (-want +got):\n%s", diff)
			}
			if m.Len() != len(tc.want) {
				t.Errorf("Len() = %d, want %d", m.Len(), len(tc.want))
			}
			for k, v := range tc.want {
				if got, ok := m.Get(k); !ok || got != v {
					t.Errorf("Get(%q) = %v, %v; want %v, true", k, got, ok, v)
				}
			}
		})
	}
}

// TestAgainstBuiltin drives random operations against a Go map and checks
// that every older version is left untouched.
func TestAgainstBuiltin(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var m Map[int, int]
	ref := map[int]int{}
	type version struct {
		m   Map[int, int]
		ref map[int]int
	}
	var versions []version
	for i := range 20000 {
		k := r.IntN(3000)
		if r.IntN(3) == 0 {
			m = m.Delete(k)
			delete(ref, k)
		} else {
			m = m.Set(k, i)
			ref[k] = i
		}
		if i%2000 == 0 {
			versions = append(versions, version{m, cloneMap(ref)})
		}
	}
	if diff := cmp.Diff(ref, contents(m)); diff != "" {
		t.Fatalf("final contents differ (-want +got):\n%s", diff)
	}
	for i, v := range versions {
		if diff := cmp.Diff(v.ref, contents(v.m)); diff != "" {
			t.Errorf("version %d was modified (-want +got):\n%s", i, diff)
		}
		if v.m.Len() != len(v.ref) {
			t.Errorf("version %d: Len() = %d, want %d", i, v.m.Len(), len(v.ref))
		}
	}
}

// TestTxnAgainstBuiltin applies random batches through Txns, with plain
// Sets and Deletes between them, and checks every published version,
// including the ones batches started from, against a builtin map.
func TestTxnAgainstBuiltin(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var m Map[int, int]
	ref := map[int]int{}
	type version struct {
		m   Map[int, int]
		ref map[int]int
	}
	var versions []version
	for batch := range 200 {
		versions = append(versions, version{m, cloneMap(ref)})
		txn := m.Txn()
		for i := range r.IntN(300) {
			k := r.IntN(3000)
			if r.IntN(3) == 0 {
				txn.Delete(k)
				delete(ref, k)
			} else {
				txn.Set(k, batch*1000+i)
				ref[k] = batch*1000 + i
			}
			want, wantOK := ref[k]
			if got, ok := txn.Get(k); got != want || ok != wantOK {
				t.Fatalf("batch %d: Get(%d) = %d, %v during the batch, want %d, %v", batch, k, got, ok, want, wantOK)
			}
		}
		m = txn.Map()
		if r.IntN(2) == 0 {
			k := r.IntN(3000)
			m = m.Set(k, -batch)
			ref[k] = -batch
		}
	}
	versions = append(versions, version{m, ref})
	for i, v := range versions {
		if diff := cmp.Diff(v.ref, contents(v.m)); diff != "" {
			t.Errorf("version %d differs (-want +got):\n%s", i, diff)
		}
		if v.m.Len() != len(v.ref) {
			t.Errorf("version %d: Len() = %d, want %d", i, v.m.Len(), len(v.ref))
		}
	}
}

func cloneMap(m map[int]int) map[int]int {
	out := make(map[int]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestCollisionBuckets forces equal hashes through the node methods so that
// the buckets below the last trie level are exercised.
func TestCollisionBuckets(t *testing.T) {
	const h = 0xdeadbeef
	var root *node[int, int]
	for i := range 10 {
		root, _ = root.set(h, 0, i, i, nil)
	}
	m := Map[int, int]{root: root, n: 10}
	want := map[int]int{}
	for i := range 10 {
		want[i] = i
	}
	if diff := cmp.Diff(want, contents(m)); diff != "" {
		t.Fatalf("contents (-want +got):\n%s", diff)
	}
	for i := range 10 {
		var removed bool
		root, removed = root.delete(h, 0, i, nil)
		if !removed {
			t.Fatalf("delete(%d) removed nothing", i)
		}
	}
	if root != nil {
		t.Fatalf("root not nil after deleting every key")
	}
}

func BenchmarkSet(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		var m Map[int, int]
		for i := range n {
			m = m.Set(i, i)
		}
		b.Run("n="+itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_ = m.Set(i%n, i)
			}
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf []byte
	for ; n > 0; n /= 10 {
		buf = append([]byte{byte('0' + n%10)}, buf...)
	}
	return string(buf)
}
