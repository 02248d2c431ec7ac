package proxykit

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// runnerConfig configures a runner.
type runnerConfig struct {
	clock clock.Clock
	// min is the least time from the end of one sync to the start of the
	// next; period is the longest time without a sync; retry is the first
	// wait after a failure, doubling per consecutive failure up to
	// maxRetry.
	min, period, retry, maxRetry time.Duration
	sync                         func(context.Context) error
	// next, if set, is how long the loop may wait after a successful
	// sync before the next one is owed; at most period.
	next   func() time.Duration
	logger logr.Logger
	// onSleep, if set, is told each wait the loop starts (its length and
	// whether a request ends it), so that tests know when the loop is
	// parked and a fake clock may be stepped.
	onSleep func(d time.Duration, wakeable bool)
}

// runner is a bounded-frequency loop with kube-proxy's BoundedFrequencyRunner
// semantics, minus its panics and plus a context: requests coalesce into at
// most one pending sync; a sync starts no earlier than min after the
// previous one ended; without requests one runs period after the last; a
// failed sync is retried after an exponential backoff (a request may run it
// sooner, min still applies). Syncs run only on the loop's goroutine, so
// never two at once.
type runner struct {
	runnerConfig
	requests chan struct{}
}

func newRunner(cfg runnerConfig) *runner {
	return &runner{runnerConfig: cfg, requests: make(chan struct{}, 1)}
}

// request asks for a sync as soon as min allows. It never blocks.
func (r *runner) request() {
	select {
	case r.requests <- struct{}{}:
	default:
	}
}

// loop runs syncs until ctx is done.
func (r *runner) loop(ctx context.Context) {
	var lastEnd time.Time
	ran := false
	failures := 0
	wait := r.period
	for {
		if !r.sleep(ctx, wait, r.requests) {
			return
		}
		if ran {
			if d := lastEnd.Add(r.min).Sub(r.clock.Now()); d > 0 && !r.sleep(ctx, d, nil) {
				return
			}
		}
		// This sync covers every change recorded so far, so a request
		// that arrived meanwhile is satisfied by it.
		select {
		case <-r.requests:
		default:
		}
		err := r.sync(ctx)
		lastEnd, ran = r.clock.Now(), true
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			failures, wait = 0, r.period
			if r.next != nil {
				wait = min(wait, r.next())
			}
			continue
		}
		failures++
		wait = r.backoff(failures)
		r.logger.Error(err, "Sync failed; retrying", "failures", failures, "retryIn", wait)
	}
}

// sleep waits for d to pass or a value on wake (nil: no wake-up). It
// returns false if ctx ended first.
func (r *runner) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := r.clock.NewTimer(d)
	defer t.Stop()
	if r.onSleep != nil {
		r.onSleep(d, wake != nil)
	}
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	case <-t.C():
	}
	return true
}

// backoff returns the wait after the n-th consecutive failure.
func (r *runner) backoff(n int) time.Duration {
	d := r.retry
	for i := 1; i < n && d < r.maxRetry; i++ {
		d *= 2
	}
	return min(d, r.maxRetry)
}
