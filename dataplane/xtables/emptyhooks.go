package xtables

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// With the nf_tables backend, iptables-nft creates the nftables table behind
// an iptables table, and each built-in chain in it as a base chain hooked
// into the stack, the first time a rule goes there, and deleting the rules
// leaves them. A hooked base chain costs every packet a visit even when
// empty, and one of type nat makes conntrack NAT-track every flow, so a
// program's cleanup removes what its jumps made exist once it is empty
// (RemoveEmptyHooks).
//
// Whether a base chain existed before the program first wrote cannot be
// known: cleanup usually runs in another process than the one that
// programmed (the agent's --cleanup), and iptables-nft marks its objects as
// its own, not as any caller's. What is removed is instead what removing
// cannot change for anyone: a base chain the program hooks, holding no
// rule, whose policy is accept (an empty chain with policy drop, as a node
// firewall sets on FORWARD, is a rule in itself and stays), and the table
// once nothing else is left in it. iptables-nft recreates either the next
// time someone adds a rule there. The kernel refuses to delete a chain that
// gained a rule in the meantime, so a race with another writer fails the
// deletion rather than losing that rule; only an object added to the table
// between the listing and the deletion could go with the table.

// RemoveEmptyHooks removes, once a program's jumps and chains are gone,
// the empty nftables objects that programming table through iptables-nft
// left: among hooked, the built-in chains the program jumps from, those
// that hold no rule and accept, and the table when nothing else is in it
// (see above). It goes through sigs.k8s.io/knftables, so only r's kernel
// (an *ExecRunner's, the calling thread's) is touched, and only with the
// nf_tables backend: another Runner or the legacy backend leaves
// everything as it is, and so does a node without a usable nft, which is
// logged on log. Removed objects are logged at V(2).
func RemoveEmptyHooks(ctx context.Context, r Runner, log logr.Logger, table string, hooked []string) error {
	er, ok := r.(*ExecRunner)
	if !ok || er.backend != "nft" || len(hooked) == 0 {
		return nil
	}
	family := knftables.IPv4Family
	if er.cfg.Family == v1.IPv6Protocol {
		family = knftables.IPv6Family
	}
	nft, err := knftables.New(family, table)
	if err != nil {
		log.Info("Leaving the empty base chains of iptables-nft: nft is not usable", "table", table, "err", err)
		return nil
	}
	// The policies are read from iptables-nft-save, which prints them
	// as iptables does; a missing table saves as nothing.
	save, err := r.Save(ctx, table)
	if err != nil {
		return err
	}
	removed, err := removeEmptyHooks(ctx, nft, hooked, chainPolicies(save))
	if err != nil {
		return fmt.Errorf("remove empty iptables-nft chains of %s %s: %w", family, table, err)
	}
	if len(removed) > 0 {
		log.V(2).Info("Removed empty nftables objects left by iptables-nft", "table", table, "removed", removed)
	}
	return nil
}

// HookedChains returns the built-in chains of table that jumps are in,
// sorted: what RemoveEmptyHooks may remove for the program that inserts
// them.
func HookedChains(jumps []Jump, table string) []string {
	var out []string
	for _, j := range jumps {
		if j.Table == table && !slices.Contains(out, j.Chain) {
			out = append(out, j.Chain)
		}
	}
	slices.Sort(out)
	return out
}

// removeEmptyHooks deletes, in one transaction, the chains among hooked that
// hold no rule and whose policy is ACCEPT, and nft's table when nothing
// else is in it. It returns what it deleted: chain names, then "table" when
// the table went.
func removeEmptyHooks(ctx context.Context, nft knftables.Interface, hooked []string, policies map[string]string) ([]string, error) {
	objects, err := nft.ListAll(ctx)
	if knftables.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rules, err := nft.ListRules(ctx, "")
	if err != nil {
		return nil, err
	}
	inUse := map[string]bool{}
	for _, r := range rules {
		inUse[r.Chain] = true
	}
	var removed []string
	kept := 0
	for kind, names := range objects {
		if kind == "table" {
			continue
		}
		for _, name := range names {
			if kind == "chain" && slices.Contains(hooked, name) && !inUse[name] && policies[name] == "ACCEPT" {
				removed = append(removed, name)
			} else {
				kept++
			}
		}
	}
	slices.Sort(removed)
	tx := nft.NewTransaction()
	for _, name := range removed {
		tx.Delete(&knftables.Chain{Name: name})
	}
	if kept == 0 {
		tx.Delete(&knftables.Table{})
		removed = append(removed, "table")
	}
	if tx.NumOperations() == 0 {
		return nil, nil
	}
	if err := nft.Run(ctx, tx); err != nil {
		return nil, err
	}
	return removed, nil
}

// chainPolicies returns the policy of every built-in chain in save, from its
// ":CHAIN POLICY [packets:bytes]" line; user chains have policy "-" and are
// left out.
func chainPolicies(save []byte) map[string]string {
	out := map[string]string{}
	for line := range bytes.Lines(save) {
		if !bytes.HasPrefix(line, []byte(":")) {
			continue
		}
		f := bytes.Fields(line[1:])
		if len(f) >= 2 && !bytes.Equal(f[1], []byte("-")) {
			out[string(f[0])] = string(f[1])
		}
	}
	return out
}
