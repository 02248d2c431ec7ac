package xtables

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"slices"

	"github.com/proxykit/proxykit/dataplane/internal/nfgen"
	v1 "k8s.io/api/core/v1"
)

// SumOf returns how a canary fingerprints the chains and jumps of an
// OwnedChains, to compare with the fingerprint taken after its last
// write: for the nft backend, from one netlink dump per table, with no
// process (iptables-save costs a fork and exec, a quarter of a second
// under emulation, and a canary waits nine times what its poll took);
// otherwise from List. The fingerprint follows the owned chains' rules,
// without their counters, and whether each jump is in place; a foreign
// rule in a built-in chain leaves it.
func SumOf(r Runner) func(context.Context, *OwnedChains) (uint64, error) {
	if e, ok := r.(*ExecRunner); ok && e.backend == "nft" {
		family := uint8(nfgen.FamilyIPv4)
		if e.cfg.Family == v1.IPv6Protocol {
			family = nfgen.FamilyIPv6
		}
		return func(ctx context.Context, o *OwnedChains) (uint64, error) { return o.netlinkSum(ctx, family) }
	}
	return func(ctx context.Context, o *OwnedChains) (uint64, error) {
		l, err := o.List(ctx, r)
		if err != nil {
			return 0, err
		}
		return o.listingSum(l), nil
	}
}

// netlinkSum fingerprints the chains and jumps from the kernel's tables of
// family, read over netlink.
func (o *OwnedChains) netlinkSum(ctx context.Context, family uint8) (uint64, error) {
	tables := map[string]nfgen.Table{}
	read := func(table string) (nfgen.Table, error) {
		if t, ok := tables[table]; ok {
			return t, nil
		}
		t, err := nfgen.ReadTable(ctx, family, table)
		tables[table] = t
		return t, err
	}
	h := fnv.New64a()
	var b [8]byte
	for _, c := range o.Chains {
		t, err := read(c.Table)
		if err != nil {
			return 0, err
		}
		binary.NativeEndian.PutUint64(b[:], t.Sum(c.Name))
		h.Write(b[:])
	}
	for _, j := range o.Jumps {
		t, err := read(j.Table)
		if err != nil {
			return 0, err
		}
		h.Write(present(t.Jumps(j.Chain, j.target())))
	}
	return h.Sum64(), nil
}

// listingSum fingerprints the chains and jumps of a listing.
func (o *OwnedChains) listingSum(l Listing) uint64 {
	h := fnv.New64a()
	for _, c := range o.Chains {
		for _, r := range l[c] {
			h.Write([]byte(r))
			h.Write([]byte{'\n'})
		}
		h.Write([]byte{0})
	}
	for _, j := range o.Jumps {
		h.Write(present(slices.ContainsFunc(l[Chain{j.Table, j.Chain}], j.matches)))
	}
	return h.Sum64()
}

func present(ok bool) []byte {
	if ok {
		return []byte{1}
	}
	return []byte{0}
}
