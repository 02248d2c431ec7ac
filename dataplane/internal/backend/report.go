package backend

import (
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// Skipper reports the inputs a dataplane leaves out as invalid (a service
// port, endpoint, address or setting): its Skip is the dataplane's
// fanout.Skip.
type Skipper struct {
	// Log receives each reason at V(1), with the key-value pairs.
	Log logr.Logger
	// Skipped, if set, counts them.
	Skipped prometheus.Counter
	// OnSkip, if set, is called with each reason: Config.OnSkip.
	OnSkip func(reason string)
}

// Skip reports one input left out for reason; kv say which.
func (s Skipper) Skip(reason string, kv ...any) {
	s.Log.V(1).Info("Skipping invalid input", append([]any{"reason", reason}, kv...)...)
	if s.Skipped != nil {
		s.Skipped.Inc()
	}
	if s.OnSkip != nil {
		s.OnSkip(reason)
	}
}

// Locked returns *v as read under mu: a dataplane's last sync statistics,
// guarded by the mutex that serializes its syncs, so that a read waits for
// the sync under way.
func Locked[T any](mu *sync.Mutex, v *T) T {
	mu.Lock()
	defer mu.Unlock()
	return *v
}
