package main

import (
	"context"
	"errors"
	"io"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// removeOtherModes removes what the agent's other proxy modes left in the
// kernel (their chains, tables, virtual servers, ipsets, links and policy
// routes), as kube-proxy removes its other modes' rules when it starts, so
// that the agent restarted with another --proxy-mode leaves nothing of the
// previous one. It runs before the first sync, so that the new mode's
// rules serve traffic from that sync on. Each mode's own dataplanes
// remove what they own (its prefix, its table, its sets' members), so
// nothing of another program, nor kube-proxy's (KUBE- chains, table
// kube-proxy), is touched. A mode whose kernel feature the node lacks is
// skipped, and, as by kube-proxy, a failure is logged and the agent goes
// on. It reports whether anything was removed.
func (o *options) removeOtherModes(ctx context.Context, h host, log logr.Logger) (removed bool) {
	for _, mode := range builtModes {
		if mode == o.proxyMode {
			continue
		}
		planes, err := o.modePlanes(h, mode, log)
		if err != nil {
			log.Info("Not looking for another proxy mode's objects: the node cannot hold them", "mode", mode, "reason", err.Error())
			continue
		}
		for _, pl := range planes {
			removed = removeLeftovers(ctx, log, mode, pl) || removed
		}
	}
	return removed
}

// modePlanes returns mode's dataplanes on h, for their cleanup alone:
// their metrics go to a registry of their own and their logs one level
// down, as what they say of themselves (IPv6 not proxied, say) is not the
// running mode's.
func (o *options) modePlanes(h host, mode string, log logr.Logger) ([]plane, error) {
	if err := h.lacks(mode); err != nil {
		return nil, err
	}
	cfg := *o.cfg
	// The scheduler names no object, and another mode ignores it: a name
	// mode ipvs refuses must not keep its objects in the kernel.
	cfg.IPVS.Scheduler = ""
	other := *o
	other.cfg, other.proxyMode = &cfg, mode
	return other.dataplanes(h, log.V(1), prometheus.NewRegistry(), io.Discard)
}

// removeLeftovers removes what pl owns when there is something, and says
// what that was. Nothing is written when nothing is found: iptables'
// Cleanup would otherwise remove the empty base chains iptables-nft keeps,
// which may be another program's.
func removeLeftovers(ctx context.Context, log logr.Logger, mode string, pl plane) bool {
	if pl.close != nil {
		defer pl.close()
	}
	_, counts, countErr := pl.owned(ctx)
	if countErr == nil && !anyCounted(counts) {
		return false
	}
	kv := append([]any{"mode", mode, "ipFamily", pl.family}, counts...)
	if err := pl.Cleanup(ctx); err != nil {
		log.Error(err, "Could not remove another proxy mode's objects", kv...)
		return false
	}
	if countErr != nil {
		kv = append(kv, "countErr", countErr.Error())
	}
	log.Info("Removed another proxy mode's objects", kv...)
	return true
}

// lacks says why h cannot hold mode's objects, nil when it may: a node
// without nft has no nftables table, one without the ip_vs module no
// virtual server. It loads nothing: IPVS is probed before it is opened,
// as opening it runs modprobe. A fake host without a door has nothing
// behind it.
func (h host) lacks(mode string) error {
	switch {
	case mode == "nftables":
		if h.nft == nil {
			return errors.New("no nft")
		}
		return nil
	case h.runner == nil:
		return errors.New("no iptables")
	case mode == "ipvs" && (h.ipvs == nil || h.probeIPVS == nil):
		return errors.New("no IPVS")
	case mode == "ipvs":
		return h.probeIPVS()
	case mode == "userspace" && h.routing == nil:
		return errors.New("no policy routing")
	}
	return nil
}
