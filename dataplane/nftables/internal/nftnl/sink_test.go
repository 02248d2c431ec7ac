package nftnl_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

// TestSink: a Sink hands over the batch a Conn would send, byte for byte,
// and a batch its send refuses defines no set for the next.
func TestSink(t *testing.T) {
	script, err := os.ReadFile("testdata/wire-ip.nft")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := scriptOps(string(script))
	if err != nil {
		t.Fatal(err)
	}
	want, err := nftnl.EncodeForTest(knftables.IPv4Family, table, ops)
	if err != nil {
		t.Fatal(err)
	}
	refuse := errors.New("refused")
	var got [][]byte
	fail := false
	s, err := nftnl.NewSink(knftables.IPv4Family, table, func(b []byte) error {
		if fail {
			return refuse
		}
		got = append(got, slices.Clone(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Run(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !bytes.Equal(got[0], want) {
		t.Fatalf("the Sink's batch differs from the Conn's:\n%s", cmp.Diff(dumpBatch(want), dumpBatch(got[0])))
	}

	set := nftnl.Op{Verb: nftnl.Add, Obj: &knftables.Set{Name: "refused", Type: "ipv4_addr"}}
	elem := nftnl.Op{Verb: nftnl.Add, Obj: &knftables.Element{Set: "refused", Key: []string{"10.0.0.1"}}}
	fail = true
	if err := s.Run(ctx, []nftnl.Op{set}); !errors.Is(err, refuse) {
		t.Fatalf("Run with send refusing: %v, want %v", err, refuse)
	}
	fail = false
	if err := s.Run(ctx, []nftnl.Op{elem}); err == nil {
		t.Error("an element of a set only a refused batch defined was encoded")
	}
	if err := s.Run(ctx, []nftnl.Op{set, elem}); err != nil {
		t.Errorf("a set and its element: %v", err)
	}
}

// TestElements: Elements encode as the knftables.Elements they stand
// for, one each, in any mix with them.
func TestElements(t *testing.T) {
	declare := []nftnl.Op{
		{Verb: nftnl.Add, Obj: &knftables.Table{}},
		{Verb: nftnl.Add, Obj: &knftables.Map{Name: "m1", TypeOf: "numgen random mod 1 : ip daddr . tcp dport"}},
		{Verb: nftnl.Add, Obj: &knftables.Map{Name: "m2", TypeOf: "numgen random mod 1 : ip daddr . tcp dport"}},
		{Verb: nftnl.Add, Obj: &knftables.Set{Name: "s", Type: "ipv4_addr"}},
		{Verb: nftnl.Add, Obj: &knftables.Map{Name: "v", Type: "ipv4_addr . inet_proto . inet_service : verdict"}},
		{Verb: nftnl.Add, Obj: &knftables.Chain{Name: "c"}},
		{Verb: nftnl.Add, Obj: &knftables.Map{Name: "p2", TypeOf: "ip daddr . tcp dport . numgen random mod 1 : ip daddr . tcp dport"}},
		{Verb: nftnl.Add, Obj: &knftables.Map{Name: "p1", TypeOf: "tcp dport . numgen random mod 1 : ip daddr . tcp dport"}},
	}
	runs := []*nftnl.Elements{
		{Set: "m1", First: 65536, Values: []string{"10.0.0.1 . 80", "10.0.0.2 . 8080"}},
		{Set: "m2", First: 0, Values: []string{"10.0.1.1 . 443"}},
		{Set: "m1", First: 7, Values: []string{"10.0.2.1 . 53", "10.0.2.2 . 53", "10.0.2.3 . 53"}},
		{Set: "s", Keys: []string{"10.0.3.1", "10.0.3.2"}},
		{Set: "v", Keys: []string{"10.0.4.1 . tcp . 80", "10.0.4.2 . udp . 53"}, Values: []string{"drop", "goto c"}, Comments: []string{"ns/a", ""}},
		// Numbered keys after a prefix: two fields, and one that a
		// concatenation pads.
		{Set: "p2", Prefix: "10.96.0.1 . 443", Values: []string{"10.0.5.1 . 6443", "10.0.5.2 . 6443"}},
		{Set: "p2", Prefix: "10.96.0.2 . 80", First: 3, Values: []string{"10.0.5.3 . 8080"}},
		{Set: "p1", Prefix: "53", Values: []string{"10.0.6.1 . 53", "10.0.6.2 . 53", "10.0.6.3 . 53"}},
	}
	for _, verb := range []nftnl.Verb{nftnl.Add, nftnl.Delete} {
		compact, single := slices.Clone(declare), slices.Clone(declare)
		for k, r := range runs {
			if k == 1 {
				// One element given alone between the runs.
				e := &knftables.Element{Map: "m2", Key: []string{"9"}, Value: []string{"10.0.9.9 . 9"}}
				compact = append(compact, nftnl.Op{Verb: verb, Obj: e})
				single = append(single, nftnl.Op{Verb: verb, Obj: e})
			}
			compact = append(compact, nftnl.Op{Verb: verb, Elems: r})
			for i := range r.Len() {
				single = append(single, nftnl.Op{Verb: verb, Obj: r.Element(i)})
			}
		}
		want, err := nftnl.EncodeForTest(knftables.IPv4Family, table, single)
		if err != nil {
			t.Fatal(err)
		}
		got, err := nftnl.EncodeForTest(knftables.IPv4Family, table, compact)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(dumpBatch(want), dumpBatch(got)); d != "" {
			t.Errorf("verb %d: Elements encode otherwise than their elements (-single +compact):\n%s", verb, d)
		}
		var tx, txSingle strings.Builder
		for _, ops := range [][]nftnl.Op{compact, single} {
			ft := knftables.NewFake(knftables.IPv4Family, table).NewTransaction()
			for _, o := range ops {
				o.AddTo(ft)
			}
			if &ops[0] == &compact[0] {
				tx.WriteString(ft.String())
			} else {
				txSingle.WriteString(ft.String())
			}
		}
		if tx.String() != txSingle.String() {
			t.Errorf("verb %d: Elements as text:\n%s\nwant\n%s", verb, tx.String(), txSingle.String())
		}
	}
	// A prefix that the key's fields do not read, or one where the key
	// is a number alone or none ends in a number, is refused.
	for _, r := range []*nftnl.Elements{
		{Set: "p2", Prefix: "10.96.0.1", Values: []string{"10.0.5.1 . 6443"}},
		{Set: "p2", Prefix: "10.96.0.1 . http . 1", Values: []string{"10.0.5.1 . 6443"}},
		{Set: "p2", Values: []string{"10.0.5.1 . 6443"}},
		{Set: "m1", Prefix: "10.96.0.1", Values: []string{"10.0.5.1 . 6443"}},
		{Set: "v", Prefix: "10.0.4.1 . tcp", Values: []string{"drop"}},
	} {
		ops := append(slices.Clone(declare), nftnl.Op{Verb: nftnl.Add, Elems: r})
		var ee *nftnl.ElementError
		if _, err := nftnl.EncodeForTest(knftables.IPv4Family, table, ops); !errors.As(err, &ee) {
			t.Errorf("Elements %+v: %v, want an ElementError", *r, err)
		}
	}
}
