package iptables

import (
	"context"
	"strings"

	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/xtables"
)

// disturb changes, through r, what a Dataplane with the default prefix
// programmed, as another program would:
//   - FlushAll flushes every chain of nat and filter ("iptables -F");
//   - RemoveOne flushes the first per-service nat chain (or, with none,
//     PK-SERVICES);
//   - AddForeign puts a RETURN at the top of nat PK-SERVICES, so that no
//     service is translated.
func disturb(ctx context.Context, r xtables.Runner, d dataplanetest.Disturbance) error {
	var in string
	switch d {
	case dataplanetest.FlushAll:
		in = "*nat\n-F\nCOMMIT\n*filter\n-F\nCOMMIT\n"
	case dataplanetest.RemoveOne:
		save, err := r.Save(ctx, "nat")
		if err != nil {
			return err
		}
		victim := DefaultChainPrefix + "SERVICES"
		for _, c := range (&Dataplane{names: mustNames()}).parseListing("nat", save).chainNames() {
			if strings.HasPrefix(c, DefaultChainPrefix+"SVC-") {
				victim = c
				break
			}
		}
		in = "*nat\n-F " + victim + "\nCOMMIT\n"
	case dataplanetest.AddForeign:
		in = "*nat\n-I " + DefaultChainPrefix + "SERVICES 1 -j RETURN\nCOMMIT\n"
	default:
		return dataplanetest.ErrCannotDisturb
	}
	return r.Restore(ctx, xtables.RestoreBytes(in))
}

func mustNames() chainNames {
	n, err := newChainNames("")
	if err != nil {
		panic(err)
	}
	return n
}
