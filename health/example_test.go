package health_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/proxykit/proxykit/health"
	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// A sync loop reports each change (Queued), each sync's start (Syncing)
// and each family it programmed (Synced). A change that waits the timeout
// for a successful sync turns /livez (and /healthz) unhealthy until one
// succeeds.
func Example() {
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t := health.NewTracker(clock, time.Minute, "")
	t.Start(v1.IPv4Protocol)
	t.Syncing(v1.IPv4Protocol) // the initial sync begins...
	t.Synced(v1.IPv4Protocol)  // ...and succeeds

	livez := func() int {
		w := httptest.NewRecorder()
		t.Livez().ServeHTTP(w, httptest.NewRequest("GET", "/livez", nil))
		return w.Code
	}
	t.Queued(v1.IPv4Protocol)
	clock.Step(time.Minute)
	fmt.Println("change late:", livez())
	t.Syncing(v1.IPv4Protocol)
	t.Synced(v1.IPv4Protocol)
	fmt.Println("synced:", livez())
	// Output:
	// change late: 503
	// synced: 200
}
