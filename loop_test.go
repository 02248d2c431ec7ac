package proxykit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// loopHarness drives a runner with a fake clock: every sync and every wait
// the loop starts is reported on a channel, so the test steps the clock only
// while the loop is parked.
type loopHarness struct {
	t      *testing.T
	clock  *clocktesting.FakeClock
	r      *runner
	syncs  chan time.Time
	sleeps chan sleepCall
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	results []error
	running atomic.Int32
	overlap atomic.Bool
}

type sleepCall struct {
	D        time.Duration
	Wakeable bool
}

func newLoopHarness(t *testing.T, min, period, retry, maxRetry time.Duration) *loopHarness {
	h := &loopHarness{
		t:      t,
		clock:  clocktesting.NewFakeClock(t0),
		syncs:  make(chan time.Time, 100),
		sleeps: make(chan sleepCall, 100),
		done:   make(chan struct{}),
	}
	h.r = newRunner(runnerConfig{
		clock: h.clock, min: min, period: period, retry: retry, maxRetry: maxRetry,
		logger:  testr.New(t),
		sync:    h.sync,
		onSleep: func(d time.Duration, w bool) { h.sleeps <- sleepCall{d, w} },
	})
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.done)
		h.r.loop(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-h.done
		if h.overlap.Load() {
			t.Error("two syncs ran at once")
		}
	})
	return h
}

// failNext scripts the results of the next syncs.
func (h *loopHarness) failNext(errs ...error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.results = append(h.results, errs...)
}

func (h *loopHarness) sync(context.Context) error {
	if h.running.Add(1) > 1 {
		h.overlap.Store(true)
	}
	defer h.running.Add(-1)
	h.syncs <- h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.results) == 0 {
		return nil
	}
	err := h.results[0]
	h.results = h.results[1:]
	return err
}

// expectSleep waits until the loop parks and checks how.
func (h *loopHarness) expectSleep(want sleepCall) {
	h.t.Helper()
	select {
	case got := <-h.sleeps:
		if got != want {
			h.t.Fatalf("loop waits %+v, want %+v", got, want)
		}
	case s := <-h.syncs:
		h.t.Fatalf("unexpected sync at %v while waiting for %+v", s.Sub(t0), want)
	case <-time.After(10 * time.Second):
		h.t.Fatalf("loop did not park (want %+v)", want)
	}
}

// expectSync waits for a sync and checks when (relative to t0) it ran.
func (h *loopHarness) expectSync(at time.Duration) {
	h.t.Helper()
	select {
	case s := <-h.syncs:
		if got := s.Sub(t0); got != at {
			h.t.Fatalf("sync at %v, want %v", got, at)
		}
	case <-time.After(10 * time.Second):
		h.t.Fatalf("no sync (want one at %v)", at)
	}
}

func (h *loopHarness) expectNoSync() {
	h.t.Helper()
	select {
	case s := <-h.syncs:
		h.t.Fatalf("unexpected sync at %v", s.Sub(t0))
	default:
	}
}

func TestLoopCoalescesBurst(t *testing.T) {
	h := newLoopHarness(t, time.Second, 30*time.Second, time.Second, 30*time.Second)
	h.expectSleep(sleepCall{30 * time.Second, true})
	h.r.request()
	h.expectSync(0)
	h.expectSleep(sleepCall{30 * time.Second, true})
	for range 10 {
		h.r.request()
	}
	h.expectSleep(sleepCall{time.Second, false})
	h.clock.Step(time.Second)
	h.expectSync(time.Second)
	h.expectSleep(sleepCall{30 * time.Second, true})
	h.expectNoSync()
}

func TestLoopMinPeriod(t *testing.T) {
	h := newLoopHarness(t, 5*time.Second, 30*time.Second, time.Second, 30*time.Second)
	h.expectSleep(sleepCall{30 * time.Second, true})
	h.r.request()
	h.expectSync(0)
	h.expectSleep(sleepCall{30 * time.Second, true})
	h.clock.Step(2 * time.Second)
	h.r.request()
	// 2s of the 5s cooldown have passed.
	h.expectSleep(sleepCall{3 * time.Second, false})
	h.clock.Step(2 * time.Second)
	h.expectNoSync()
	h.clock.Step(time.Second)
	h.expectSync(5 * time.Second)
	h.expectSleep(sleepCall{30 * time.Second, true})

	// A request long after the cooldown runs at once.
	h.clock.Step(10 * time.Second)
	h.r.request()
	h.expectSync(15 * time.Second)
	h.expectSleep(sleepCall{30 * time.Second, true})
}

func TestLoopPeriodicResync(t *testing.T) {
	h := newLoopHarness(t, time.Second, 30*time.Second, time.Second, 30*time.Second)
	h.expectSleep(sleepCall{30 * time.Second, true})
	h.r.request()
	h.expectSync(0)
	for i := 1; i <= 3; i++ {
		h.expectSleep(sleepCall{30 * time.Second, true})
		h.clock.Step(29 * time.Second)
		h.expectNoSync()
		h.clock.Step(time.Second)
		h.expectSync(time.Duration(i) * 30 * time.Second)
	}
}

func TestLoopRetryBackoff(t *testing.T) {
	h := newLoopHarness(t, 500*time.Millisecond, 30*time.Second, time.Second, 5*time.Second)
	fail := errors.New("boom")
	h.failNext(fail, fail, fail, fail, fail)
	h.expectSleep(sleepCall{30 * time.Second, true})
	h.r.request()
	h.expectSync(0)
	at := time.Duration(0)
	for _, wait := range []time.Duration{1, 2, 4, 5, 5} {
		wait *= time.Second
		h.expectSleep(sleepCall{wait, true})
		h.clock.Step(wait)
		at += wait
		h.expectSync(at)
	}
	// Success resets the backoff to the periodic resync.
	h.expectSleep(sleepCall{30 * time.Second, true})
}

func TestLoopRetryWaitsForMinPeriod(t *testing.T) {
	h := newLoopHarness(t, 10*time.Second, 30*time.Second, time.Second, 30*time.Second)
	h.failNext(errors.New("boom"))
	h.expectSleep(sleepCall{30 * time.Second, true})
	h.r.request()
	h.expectSync(0)
	h.expectSleep(sleepCall{time.Second, true})
	h.clock.Step(time.Second)
	h.expectSleep(sleepCall{9 * time.Second, false})
	h.clock.Step(9 * time.Second)
	h.expectSync(10 * time.Second)
}

func TestLoopRequestPreemptsRetry(t *testing.T) {
	h := newLoopHarness(t, time.Second, 30*time.Second, 8*time.Second, 30*time.Second)
	fail := errors.New("boom")
	h.failNext(fail, fail)
	h.expectSleep(sleepCall{30 * time.Second, true})
	h.r.request()
	h.expectSync(0)
	h.expectSleep(sleepCall{8 * time.Second, true})
	h.clock.Step(2 * time.Second)
	h.r.request()
	h.expectSync(2 * time.Second)
	// Still failing: the backoff grows.
	h.expectSleep(sleepCall{16 * time.Second, true})
}

func TestLoopStopsOnCancel(t *testing.T) {
	h := newLoopHarness(t, time.Second, 30*time.Second, time.Second, 30*time.Second)
	h.expectSleep(sleepCall{30 * time.Second, true})
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		t.Fatal("loop did not stop")
	}
}

func TestBackoff(t *testing.T) {
	r := newRunner(runnerConfig{retry: time.Second, maxRetry: 10 * time.Second})
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, r.backoff(n))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
}
