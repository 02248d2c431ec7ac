package nftables

import (
	"context"
	"slices"

	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"sigs.k8s.io/knftables"
)

// disturb changes, through nft, what a Dataplane with the default table
// programmed, as another program would:
//   - FlushAll deletes the table ("nft flush ruleset");
//   - RemoveOne flushes the first per-service chain (or, with none, the
//     services chain);
//   - AddForeign puts a return at the top of the services chain, so that
//     no service is translated.
func disturb(ctx context.Context, nft knftables.Interface, d dataplanetest.Disturbance) error {
	tx := nft.NewTransaction()
	switch d {
	case dataplanetest.FlushAll:
		tx.Delete(&knftables.Table{})
	case dataplanetest.RemoveOne:
		chains, err := nft.List(ctx, "chains")
		if err != nil {
			return err
		}
		slices.Sort(chains)
		victim := chainServices
		for _, c := range chains {
			if isServiceChain(c) {
				victim = c
				break
			}
		}
		tx.Flush(&knftables.Chain{Name: victim})
	case dataplanetest.AddForeign:
		tx.Insert(&knftables.Rule{Chain: chainServices, Rule: "return"})
	default:
		return dataplanetest.ErrCannotDisturb
	}
	return nft.Run(ctx, tx)
}
