package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/ipvstest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

// realIPVS opens this machine's IPVS, or says why it cannot.
func realIPVS(v1.IPFamily) (ipvs.Kernel, error) {
	k, err := ipvs.OpenKernel()
	if err != nil {
		return nil, err
	}
	return k, nil
}

// ipvsReading reads what the kernel holds of st's family's IPVS dataplane,
// through handles opened for this reading alone; nil (and no error) for an
// IPv6 whose ip6tables is missing, as the agent then proxies IPv4 alone.
func ipvsReading(ctx context.Context, h host, log logr.Logger, st *dataplane.State) (kernelReading, error) {
	r, err := h.runner(st.Family)
	switch {
	case err != nil && st.Family == v1.IPv6Protocol:
		log.V(1).Info("IPv6 rules not read: ip6tables is not usable", "err", err)
		return nil, nil
	case err != nil:
		return nil, err
	}
	k, err := h.ipvs(st.Family)
	if err != nil {
		return nil, fmt.Errorf("--proxy-mode ipvs: %w", err)
	}
	defer closeHandles(k)
	d, err := ipvs.New(ipvs.Config{Family: st.Family, Kernel: k, Runner: r})
	if err != nil {
		return nil, err
	}
	reading, err := d.Read(ctx)
	if err != nil {
		return nil, err
	}
	kr := ipvs.NewNamedReading(reading, st)
	// Other programs' iptables rules run before IPVS sees a packet.
	var save []byte
	for _, table := range []string{"nat", "filter"} {
		out, err := r.Save(ctx, table)
		if err != nil {
			log.Info("Other programs' iptables rules not read: one that decides first is not seen", "family", st.Family, "err", err)
			return kr, nil
		}
		save = append(save, out...)
	}
	others := xtables.NewReadingWithout(save, ipvs.DefaultPrefix+"-", st.Node.IPs)
	kr.Others = others.Rules
	if h.ipsets != nil {
		if sets, err := h.ipsets(); err == nil {
			kr.Others.SetIPSets(sets)
		} else {
			log.Info("The node's ipsets not read: other programs' rules that match a set are taken as not matching", "err", err)
		}
	}
	if n := len(others.Skipped); n > 0 {
		log.Info("Some rules of other programs are not modelled: a trace may miss what they do", "family", st.Family, "rules", n)
	}
	return kr, nil
}

// closeHandles closes k if it can be: the kernel's handles, not the
// fakes.
func closeHandles(k any) {
	if c, ok := k.(interface{ Close() }); ok {
		c.Close()
	}
}

// ipvsPlanes returns one IPVS dataplane per IP family. A dry run programs
// fakes and prints the iptables input and the IPVS table of each sync. A
// real run needs IPVS and iptables for IPv4 and adds IPv6 when ip6tables
// works; without the ip_vs module it fails before programming anything.
func (o *options) ipvsPlanes(h host, log logr.Logger, out io.Writer) ([]plane, error) {
	c := o.cfg.IPVS
	if c.Scheduler != "" && !slices.Contains(ipvs.Schedulers(), c.Scheduler) {
		return nil, fmt.Errorf("--ipvs-scheduler %q: want one of %s", c.Scheduler, strings.Join(ipvs.Schedulers(), ", "))
	}
	runners, err := o.familyRunners(h, log, out)
	if err != nil {
		return nil, err
	}
	var planes []plane
	for _, fr := range runners {
		f := fr.family
		cfg := ipvs.Config{
			Family: f, Scheduler: c.Scheduler, StrictARP: c.StrictARP,
			TCPTimeout: c.TCPTimeout.Duration, TCPFinTimeout: c.TCPFinTimeout.Duration, UDPTimeout: c.UDPTimeout.Duration,
			MasqueradeBit: int(*o.cfg.IPTables.MasqueradeBit), Logger: log,
		}
		var dump func() string
		var fakeNL *ipvstest.FakeNetlink
		cfg.Runner = fr.runner
		if fr.fake != nil {
			k := ipvstest.NewKernel()
			fakeNL = k.Netlink
			cfg.Kernel = k
			dump = k.IPVS.Dump
		} else {
			k, err := h.ipvs(f)
			if err != nil {
				if errors.Is(err, ipvs.ErrNoIPVS) {
					return nil, fmt.Errorf("--proxy-mode ipvs: %w", err)
				}
				return nil, err
			}
			cfg.Kernel = k
		}
		d, err := ipvs.New(cfg)
		if err != nil {
			return nil, err
		}
		rec := &recordedIPVS{Dataplane: d, dump: dump, fakeNL: fakeNL, out: out, family: f}
		planes = append(planes, plane{Dataplane: rec, last: &rec.last, family: f, close: func() { closeHandles(cfg.Kernel) },
			owned: func(ctx context.Context) (string, []any, error) {
				l, err := d.Leftovers(ctx)
				return "no " + ipvs.DefaultPrefix + " virtual servers, addresses, sets, chains or link found",
					[]any{"virtualServers", l.VirtualServers, "addresses", l.Addresses, "ipsets", l.Sets, "chains", l.Chains, "link", l.Link}, err
			}})
	}
	return planes, nil
}

// recordedIPVS is an IPVS dataplane that keeps the last State it
// programmed and, in a dry run, prints the fake IPVS table after each
// sync.
type recordedIPVS struct {
	*ipvs.Dataplane
	last atomic.Pointer[dataplane.State]
	dump func() string
	// fakeNL is a dry run's kernel, given the model's node addresses,
	// on which the dataplane serves node ports.
	fakeNL *ipvstest.FakeNetlink
	out    io.Writer
	family v1.IPFamily
}

// Sync implements dataplane.Dataplane.
func (r *recordedIPVS) Sync(ctx context.Context, s *dataplane.State) error {
	if r.fakeNL != nil {
		r.fakeNL.SetLinkAddrs("eth0", s.Node.IPs...)
	}
	if err := r.Dataplane.Sync(ctx, s); err != nil {
		return err
	}
	r.last.Store(s)
	if r.dump != nil {
		if _, err := fmt.Fprintf(r.out, "# IPVS table (%s)\n%s\n", r.family, r.dump()); err != nil {
			return err
		}
	}
	return nil
}
