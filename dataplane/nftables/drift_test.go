package nftables

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

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

// TestCanaryNoticesEveryDisturbance: the canary sees each
// disturbance of the conformance suite, not only a flushed table, and an
// untouched or repaired table is quiet.
func TestCanaryNoticesEveryDisturbance(t *testing.T) {
	for _, dist := range []dataplanetest.Disturbance{dataplanetest.FlushAll, dataplanetest.RemoveOne, dataplanetest.AddForeign} {
		t.Run(dist.String(), func(t *testing.T) {
			ctx := t.Context()
			fake := knftables.NewFake(knftables.IPv4Family, DefaultTable)
			d, _ := testDataplane(t, fake)
			if changed, err := d.KernelChanged(ctx); err != nil || changed {
				t.Fatalf("KernelChanged before the first Sync = %v, %v; want false", changed, err)
			}
			b := newBuilder()
			b.UpdateService(nil, clusterIPService(1))
			b.UpdateEndpointSlice(nil, slice(1, 2, 0))
			if err := d.Sync(ctx, b.Build().States[0]); err != nil {
				t.Fatal(err)
			}
			want := []bool{false, true, false}
			var got []bool
			check := func() {
				changed, err := d.KernelChanged(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, changed)
			}
			check()
			if err := disturb(ctx, fake, dist); err != nil {
				t.Fatal(err)
			}
			check()
			if _, err := d.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			check()
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("KernelChanged when untouched, disturbed, repaired (-want +got):\n%s", d)
			}
		})
	}
}

// TestReconcileElementComment: an element whose comment another program
// changed, its value kept, is drift: a no-endpoint verdict names its
// service only in its comment.
func TestReconcileElementComment(t *testing.T) {
	ctx := t.Context()
	fake := knftables.NewFake(knftables.IPv4Family, DefaultTable)
	d, _ := testDataplane(t, fake)
	b := newBuilder()
	b.UpdateService(nil, clusterIPService(0))
	s := b.Build().States[0]
	if err := d.Sync(ctx, s); err != nil {
		t.Fatal(err)
	}
	key := []string{"172.30.0.1 . tcp . 80"}
	tx := fake.NewTransaction()
	tx.Delete(&knftables.Element{Map: mapNoEndpointServices, Key: key})
	tx.Add(&knftables.Element{Map: mapNoEndpointServices, Key: key, Value: []string{"goto " + chainRejectChain}, Comment: knftables.PtrTo("ns/other/tcp/p80")})
	if err := fake.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if changed, err := d.KernelChanged(ctx); err != nil || !changed {
		t.Errorf("KernelChanged = %v, %v; want true", changed, err)
	}
	drift, err := d.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{mapNoEndpointServices + `: element 172.30.0.1 . tcp . 80 has comment "ns/other/tcp/p80", want "ns/svc0/tcp/p80"`}
	if diff := cmp.Diff(want, drift.Repaired); diff != "" {
		t.Errorf("Reconcile repaired (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(freshDump(t, s), dumpLines(fake)); diff != "" {
		t.Errorf("the table differs from a fresh full sync (-fresh +got):\n%s", diff)
	}
}
