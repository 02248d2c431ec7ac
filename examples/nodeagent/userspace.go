package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/userspace"
)

// userspacePlanes returns one userspace dataplane in redirect mode per IP
// family: Go forwarders on free ports, behind TPROXY and REDIRECT rules
// written with the family's iptables Runner and a policy route made over
// rtnetlink. IPv6 is added when ip6tables works.
func (o *options) userspacePlanes(h host, log logr.Logger, reg prometheus.Registerer) ([]plane, error) {
	if o.dryRun {
		// Its rules name the ports its forwarders listen on, and a dry
		// run listens on nothing.
		return nil, errors.New("--proxy-mode userspace cannot --dry-run: its rules redirect to the ports its forwarders listen on")
	}
	runners, err := o.familyRunners(h, log, io.Discard)
	if err != nil {
		return nil, err
	}
	if h.routing == nil {
		return nil, errors.New("--proxy-mode userspace: this host has no policy routing")
	}
	var planes []plane
	for _, fr := range runners {
		f := fr.family
		routing, err := h.routing()
		if err != nil {
			return nil, fmt.Errorf("--proxy-mode userspace: %w", err)
		}
		d, err := userspace.New(userspace.Config{
			Family:     f,
			Redirect:   &userspace.RedirectConfig{Runner: fr.runner, Routing: routing},
			Logger:     log,
			Registerer: reg,
		})
		if err != nil {
			return nil, err
		}
		rec := &recordedUserspace{Dataplane: d}
		planes = append(planes, plane{Dataplane: rec, last: &rec.last, family: f,
			owned: chainsOwned(fr.runner, userspace.DefaultRedirectChainPrefix, "filter", "nat", "mangle"),
			close: func() { closeHandles(routing) }})
	}
	return planes, nil
}

// recordedUserspace is a userspace dataplane that keeps the last State it
// programmed, as recorded does for iptables.
type recordedUserspace struct {
	*userspace.Dataplane
	last atomic.Pointer[dataplane.State]
}

// Sync implements dataplane.Dataplane.
func (r *recordedUserspace) Sync(ctx context.Context, s *dataplane.State) error {
	if err := r.Dataplane.Sync(ctx, s); err != nil {
		return err
	}
	r.last.Store(s)
	return nil
}
