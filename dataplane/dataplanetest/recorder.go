package dataplanetest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/proxykit/proxykit/dataplane"
)

// ErrInjected is the error a Recorder's failing Syncs return when FailNext
// was given a nil error.
var ErrInjected = errors.New("dataplanetest: injected sync failure")

// SyncCall is one call of Recorder.Sync.
type SyncCall struct {
	State *dataplane.State
	// Err is what Sync returned; nil for a successful call.
	Err error
}

// Recorder is a Dataplane that programs nothing: it records every State it
// is given, can be told to fail Syncs, counts Cleanups, and traces packets
// by asking the State it last synced successfully. It is the fake for
// testing what drives a dataplane (sync loops, proxies), and the reference
// Harness the conformance suite checks itself with. Its methods may be
// called from any goroutine.
type Recorder struct {
	name string

	mu         sync.Mutex
	calls      []SyncCall
	programmed *dataplane.State
	failLeft   int
	failErr    error
	cleanups   int
}

var _ Harness = (*Recorder)(nil)

// NewRecorder returns a Recorder whose Name is name.
func NewRecorder(name string) *Recorder {
	return &Recorder{name: name}
}

// Name returns the name NewRecorder was given.
func (r *Recorder) Name() string { return r.name }

// Sync records s. It fails, leaving the programmed State as it was, when
// ctx is done, when s is nil, or while failures injected by FailNext are
// left.
func (r *Recorder) Sync(ctx context.Context, s *dataplane.State) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := ctx.Err()
	switch {
	case err != nil:
	case s == nil:
		err = errors.New("dataplanetest: Sync of a nil State")
	case r.failLeft > 0:
		r.failLeft--
		err = r.failErr
	}
	r.calls = append(r.calls, SyncCall{State: s, Err: err})
	if err != nil {
		return fmt.Errorf("recorder %q: %w", r.name, err)
	}
	r.programmed = s
	return nil
}

// Cleanup forgets the programmed State, so that nothing is a service any
// more, and counts the call. It fails only when ctx is done.
func (r *Recorder) Cleanup(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups++
	r.programmed = nil
	return nil
}

// FailNext makes the next n Syncs fail with err (ErrInjected when err is
// nil). It replaces any failures still pending.
func (r *Recorder) FailNext(n int, err error) {
	if err == nil {
		err = ErrInjected
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failLeft = max(n, 0)
	r.failErr = err
}

// Syncs returns every Sync call so far, in call order, failed ones
// included.
func (r *Recorder) Syncs() []SyncCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]SyncCall(nil), r.calls...)
}

// Programmed returns the State in force: that of the last successful Sync,
// or nil before the first one and after Cleanup.
func (r *Recorder) Programmed() *dataplane.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.programmed
}

// Cleanups returns how many times Cleanup succeeded.
func (r *Recorder) Cleanups() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cleanups
}

// Trace answers with the programmed State's Lookup; with nothing
// programmed, no packet is a service. It fails only when ctx is done.
func (r *Recorder) Trace(ctx context.Context, p dataplane.Packet) (dataplane.Verdict, error) {
	if err := ctx.Err(); err != nil {
		return dataplane.Verdict{}, err
	}
	s := r.Programmed()
	if s == nil {
		return dataplane.Verdict{Action: dataplane.NotAService, Reason: "nothing is programmed"}, nil
	}
	return s.Lookup(p), nil
}
