package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/iptables"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

// recorded is an iptables dataplane that keeps the last State it
// programmed, for --once's summary. Embedding keeps every method of the
// dataplane visible to the proxy.
type recorded struct {
	*iptables.Dataplane
	last atomic.Pointer[dataplane.State]
}

// Sync implements dataplane.Dataplane.
func (r *recorded) Sync(ctx context.Context, s *dataplane.State) error {
	if err := r.Dataplane.Sync(ctx, s); err != nil {
		return err
	}
	r.last.Store(s)
	return nil
}

// logOnce says what one sync programmed, in kube-proxy's terms: service
// ports (a KUBE-SVC chain each) and endpoints (a KUBE-SEP chain each).
func (o *options) logOnce(log logr.Logger, planes []plane, elapsed time.Duration) {
	var families []v1.IPFamily
	var ports, eps int
	for _, pl := range planes {
		s := pl.last.Load()
		if s == nil {
			continue
		}
		families = append(families, pl.family)
		for sp := range s.Services.All() {
			ports++
			eps += len(s.Endpoints.Get(sp.Name))
		}
	}
	msg := "Programmed the rules once"
	if o.dryRun {
		msg = "Printed the rules of one sync (dry run: nothing was programmed)"
	}
	log.Info(msg, "mode", o.proxyMode, "ipFamilies", families, "servicePorts", ports, "endpoints", eps,
		"elapsed", elapsed.Round(time.Millisecond))
}

// runCleanup removes what every dataplane owns, and what the other modes
// left, and says what that was.
func (o *options) runCleanup(ctx context.Context, h host, log logr.Logger, planes []plane) error {
	if o.dryRun {
		return errors.New("--cleanup with --dry-run: a dry run programs nothing, so there is nothing to remove")
	}
	var errs []error
	removed := false
	nothing := ""
	for _, pl := range planes {
		// Counted first: Cleanup removes whatever it finds and says
		// nothing of it.
		none, counts, countErr := pl.owned(ctx)
		nothing = none
		if err := pl.Cleanup(ctx); err != nil {
			errs = append(errs, fmt.Errorf("cleanup %s (%s): %w", pl.Name(), pl.family, err))
			continue
		}
		switch {
		case countErr != nil:
			log.Info("Removed the agent's rules", "ipFamily", pl.family, "countErr", countErr)
			removed = true
		case anyCounted(counts):
			log.Info("Removed the agent's rules", append([]any{"ipFamily", pl.family}, counts...)...)
			removed = true
		}
	}
	// As kube-proxy's --cleanup, every mode's.
	removed = o.removeOtherModes(ctx, h, log) || removed
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !removed {
		log.Info("Nothing to clean up: " + nothing)
	}
	return nil
}

// anyCounted reports whether a key-value list of counts (and flags) holds
// a non-zero count or a set flag.
func anyCounted(kv []any) bool {
	for i := 1; i < len(kv); i += 2 {
		switch v := kv[i].(type) {
		case int:
			if v > 0 {
				return true
			}
		case bool:
			if v {
				return true
			}
		}
	}
	return false
}

// chainsOwned describes, for --cleanup, the chains of prefix that r's
// tables (filter and nat, or those given) hold.
func chainsOwned(r xtables.Runner, prefix string, tables ...string) func(ctx context.Context) (string, []any, error) {
	if len(tables) == 0 {
		tables = []string{"filter", "nat"}
	}
	return func(ctx context.Context) (string, []any, error) {
		counts, err := ownedChains(ctx, r, prefix, tables)
		var kv []any
		for _, table := range tables {
			kv = append(kv, table+"Chains", counts[table])
		}
		return "no " + prefix + " chains found", kv, err
	}
}

// ownedChains counts the chains of prefix in tables.
func ownedChains(ctx context.Context, r xtables.Runner, prefix string, tables []string) (map[string]int, error) {
	counts := map[string]int{}
	for _, table := range tables {
		saved, err := r.Save(ctx, table)
		if err != nil {
			return nil, err
		}
		for line := range bytes.Lines(saved) {
			if bytes.HasPrefix(line, []byte(":"+prefix)) {
				counts[table]++
			}
		}
	}
	return counts, nil
}
