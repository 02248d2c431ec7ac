package informer

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// defaultRetryMax is Config.RetryMax's zero value.
const defaultRetryMax = 2 * time.Second

// retryInitial is the first wait after a failed call to an unreachable API
// server.
const retryInitial = 200 * time.Millisecond

// guard stands between the informers' reflectors and the API server.
//
// A reflector whose list or watch fails backs off exponentially, up to 30s
// (60s with jitter), and cannot be woken: after an API server restart a
// reflector can sleep most of a minute past the server's readiness (and
// client-go offers no way to set an informer's backoff). The guard keeps
// those failures from the reflector: while the server is unreachable or
// unavailable it retries the call itself, at most RetryMax apart, so the
// reflector's call returns soon after the server is back and its backoff
// never grows.
//
// It also says, once per resource and verb, when the server forbids a
// call: client-go's own errors repeat every backoff and do not say what
// the source waits on.
type guard struct {
	log   logr.Logger
	max   time.Duration
	after func(time.Duration) <-chan time.Time

	mu          sync.Mutex
	denied      map[string]bool
	unreachable bool
}

func newGuard(log logr.Logger, max time.Duration) *guard {
	if max <= 0 {
		max = defaultRetryMax
	}
	return &guard{log: log, max: max, after: time.After, denied: map[string]bool{}}
}

// call runs fn, the verb ("list" or "watch") on resource, retrying it while
// the API server is unreachable or unavailable, until it succeeds, fails
// otherwise, or ctx ends.
func call[T any](ctx context.Context, g *guard, verb, resource string, fn func() (T, error)) (T, error) {
	wait := retryInitial
	for {
		res, err := fn()
		switch {
		case err == nil:
			g.succeeded(verb, resource)
			return res, nil
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			g.deny(verb, resource, err)
			return res, err
		case !transient(err) || ctx.Err() != nil:
			return res, err
		}
		g.lost(err)
		// Jitter spreads the retries of many nodes over the interval.
		d := min(wait, g.max)
		d = d/2 + rand.N(d/2+1)
		select {
		case <-ctx.Done():
			return res, err
		case <-g.after(d):
		}
		wait *= 2
	}
}

// transient reports whether err says the API server is unreachable or not
// ready yet (rather than refusing the request itself): a network error,
// or a status of 429, 500, 503 or 504.
func transient(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		var ne net.Error
		return errors.As(err, &ne) || utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
	}
	return apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}

func (g *guard) lost(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.unreachable {
		g.unreachable = true
		g.log.Info("API server unreachable; retrying", "source", sourceName, "retryMax", g.max, "err", err.Error())
	}
}

func (g *guard) deny(verb, resource string, err error) {
	key := verb + " " + resource
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.denied[key] {
		return
	}
	g.denied[key] = true
	g.log.Error(err, "The API server forbids a call the source needs; it waits until permission is granted",
		"source", sourceName, "verb", verb, "resource", resource)
}

func (g *guard) succeeded(verb, resource string) {
	key := verb + " " + resource
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unreachable {
		g.unreachable = false
		g.log.Info("API server reachable again", "source", sourceName)
	}
	if g.denied[key] {
		delete(g.denied, key)
		g.log.Info("Permission granted", "source", sourceName, "verb", verb, "resource", resource)
	}
}
