package nftables

import (
	"context"

	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

// kernel is where the Dataplane's transactions go and its table is read
// from: nftables over netlink, or a knftables.Interface given as
// Config.NFT (nft -f, or a knftables.Fake).
type kernel interface {
	// Run applies ops as one transaction: all of them or, on error, none.
	Run(ctx context.Context, ops []nftnl.Op) error
	ListAll(ctx context.Context) (map[string][]string, error)
	// ListRules lists rules for their chain and comment; their text may
	// be missing.
	ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error)
	ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error)
}

// textKernel runs transactions through a knftables.Interface.
type textKernel struct {
	nft knftables.Interface
}

func (k textKernel) Run(ctx context.Context, ops []nftnl.Op) error {
	return k.nft.Run(ctx, transaction(k.nft, ops))
}

func (k textKernel) ListAll(ctx context.Context) (map[string][]string, error) {
	return k.nft.ListAll(ctx)
}

func (k textKernel) ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	return k.nft.ListRules(ctx, chain)
}

func (k textKernel) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	return k.nft.ListElements(ctx, objectType, name)
}

// netlinkKernel is nftables over netlink. The Dataplane reads rules only
// for their chain and comment, so their expressions are not read: another
// program's rule counts like any other.
type netlinkKernel struct {
	*nftnl.Conn
}

func (k netlinkKernel) ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	return k.Conn.ListRuleHeads(ctx, chain)
}
