package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/nftables"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// realNFT is the machine's nftables: nil, which the dataplane reaches
// over netlink, with no nft binary.
func realNFT(v1.IPFamily) (knftables.Interface, error) { return nil, nil }

// nftPlanes returns one nftables dataplane per IP family. A dry run prints
// each transaction (the nft -f script) and applies it to a fake. A real
// run needs nftables for IPv4 and adds IPv6 when the kernel has it.
func (o *options) nftPlanes(h host, log logr.Logger, reg prometheus.Registerer, out io.Writer) ([]plane, error) {
	var planes []plane
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		var nft knftables.Interface
		if o.dryRun {
			family := knftables.IPv4Family
			if f == v1.IPv6Protocol {
				family = knftables.IPv6Family
			}
			nft = &printingNFT{Fake: knftables.NewFake(family, nftables.DefaultTable), out: out, header: fmt.Sprintf("# nft -f input (%s)\n", f)}
		} else {
			var err error
			nft, err = h.nft(f)
			switch {
			case err != nil && f == v1.IPv6Protocol:
				log.Info("IPv6 is not proxied: nftables is not usable", "err", err)
				continue
			case err != nil:
				return nil, &nftables.UnsupportedError{Err: err}
			}
		}
		d, err := nftables.New(nftables.Config{Family: f, NFT: nft, Logger: log, Registerer: reg, MasqueradeBit: int(*o.cfg.NFTables.MasqueradeBit)})
		if err != nil && f == v1.IPv6Protocol && !o.dryRun {
			log.Info("IPv6 is not proxied: nftables is not usable", "err", err)
			continue
		}
		if err != nil {
			return nil, err
		}
		rec := &recordedNFT{Dataplane: d}
		planes = append(planes, plane{Dataplane: rec, last: &rec.last, family: f,
			owned: func(ctx context.Context) (string, []any, error) {
				n, err := d.TableChains(ctx)
				return "no " + nftables.DefaultTable + " table found", []any{"table", string(nftFamily(f)) + " " + nftables.DefaultTable, "chains", n}, err
			}})
	}
	return planes, nil
}

func nftFamily(f v1.IPFamily) knftables.Family {
	if f == v1.IPv6Protocol {
		return knftables.IPv6Family
	}
	return knftables.IPv4Family
}

// recordedNFT is an nftables dataplane that keeps the last State it
// programmed, for --once's summary. Embedding keeps every method of the
// dataplane visible to the proxy.
type recordedNFT struct {
	*nftables.Dataplane
	last atomic.Pointer[dataplane.State]
}

// Sync implements dataplane.Dataplane.
func (r *recordedNFT) Sync(ctx context.Context, s *dataplane.State) error {
	if err := r.Dataplane.Sync(ctx, s); err != nil {
		return err
	}
	r.last.Store(s)
	return nil
}

// printingNFT is a fake nftables that prints every transaction it applies.
type printingNFT struct {
	*knftables.Fake
	out    io.Writer
	header string
}

func (p *printingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	if err := p.Fake.Run(ctx, tx); err != nil {
		return err
	}
	_, err := io.WriteString(p.out, p.header+tx.String())
	return err
}
