package nftnl_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
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
