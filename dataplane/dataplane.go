package dataplane

import (
	"context"
	"strconv"
	"strings"
)

// Dataplane programs States into something that moves packets.
type Dataplane interface {
	// Name identifies the implementation in logs and metrics.
	Name() string
	// Sync makes the dataplane forward as s says. It may diff against what
	// it last programmed; after a failed Sync the previous programming
	// stays in force and the next Sync must program everything.
	Sync(ctx context.Context, s *State) error
	// Cleanup removes everything the dataplane owns.
	Cleanup(ctx context.Context) error
}

// Reconciler is implemented by a Dataplane whose programming someone else
// can change: rules in a kernel that other programs also write. The caller
// decides when to reconcile (the proxykit package does it once per sync
// period and whenever a KernelWatcher says the kernel changed); the
// dataplane decides how.
//
// Reconcile reads back everything the dataplane owns, compares it with the
// State its last successful Sync programmed, and repairs only what differs:
// not a blind rewrite, so that a reconcile of an untouched kernel writes
// nothing. It returns what it found and repaired. Before any successful
// Sync, and after Cleanup, there is nothing to compare and it returns a
// zero Drift. An error means the kernel could not be read or repaired; the
// dataplane must then treat its memory as unknown, so that the next Sync
// programs everything.
//
// Reconcile is never called concurrently with Sync or Cleanup by the
// proxykit package, but an implementation must be safe if it is.
type Reconciler interface {
	Reconcile(ctx context.Context) (Drift, error)
}

// KernelWatcher is implemented by a Dataplane that can tell cheaply whether
// someone else changed the kernel under it, for instance through canary
// chains as kube-proxy keeps them: a firewall reload or an "iptables -F"
// removes the canary with everything else. The proxykit package polls it
// on a short period, from its own goroutine (so concurrently with Sync),
// and reconciles when it reports a change.
type KernelWatcher interface {
	// KernelChanged reports whether the dataplane's canary is disturbed:
	// it was put in place by a full Sync or a Reconcile and is missing or
	// changed now. It
	// returns false before the first Sync and after Cleanup. An error
	// means the check itself failed (a busy lock, a missing binary), not
	// that the kernel changed.
	KernelChanged(ctx context.Context) (bool, error)
}

// Drift is what a Reconcile found different from what the dataplane had
// programmed, and repaired. Its zero value means the kernel was as
// programmed.
type Drift struct {
	// Repaired names each object that was missing, changed or unexpected
	// and has been rewritten or removed, in the dataplane's own words
	// ("nat chain PK-SVC-ABC: 0 rules, want 3"), sorted.
	Repaired []string
}

// Empty reports whether nothing drifted.
func (d Drift) Empty() bool { return len(d.Repaired) == 0 }

// String summarizes d for a log line: the first few repairs and how many
// more there were.
func (d Drift) String() string {
	const show = 5
	if len(d.Repaired) <= show {
		return strings.Join(d.Repaired, "; ")
	}
	return strings.Join(d.Repaired[:show], "; ") + "; and " + strconv.Itoa(len(d.Repaired)-show) + " more"
}

// SyncReporter is implemented by a Dataplane that can say what its last
// successful Sync did, so that the caller labels and logs it truthfully
// (a dataplane may decide on its own to rewrite everything).
type SyncReporter interface {
	LastSync() SyncReport
}

// SyncReport describes one successful Sync.
type SyncReport struct {
	// Full is set when the Sync rewrote everything the dataplane owns.
	Full bool
	// Services is the number of services whose programming was written.
	Services int
	// Bytes is the size of what was handed to the kernel (restore input,
	// transaction); 0 when the Sync found nothing to change.
	Bytes int
}
