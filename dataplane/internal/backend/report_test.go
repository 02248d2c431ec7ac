package backend

import (
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSkipper(t *testing.T) {
	type record struct {
		Logs    []string
		Reasons []string
		Counted float64
	}
	for _, tc := range []struct {
		name      string
		verbosity int
		onSkip    bool
		counter   bool
		want      record
	}{
		{"everything", 1, true, true, record{
			Logs:    []string{`"level"=1 "msg"="Skipping invalid input" "reason"="port 0" "service"="ns/a"`, `"level"=1 "msg"="Skipping invalid input" "reason"="bad endpoint"`},
			Reasons: []string{"port 0", "bad endpoint"},
			Counted: 2,
		}},
		{"quiet logger", 0, true, false, record{Reasons: []string{"port 0", "bad endpoint"}}},
		{"no OnSkip", 1, false, true, record{
			Logs:    []string{`"level"=1 "msg"="Skipping invalid input" "reason"="port 0" "service"="ns/a"`, `"level"=1 "msg"="Skipping invalid input" "reason"="bad endpoint"`},
			Counted: 2,
		}},
		{"nothing", 0, false, false, record{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got record
			s := Skipper{Log: funcr.New(func(prefix, args string) { got.Logs = append(got.Logs, args) }, funcr.Options{Verbosity: tc.verbosity})}
			if tc.onSkip {
				s.OnSkip = func(reason string) { got.Reasons = append(got.Reasons, reason) }
			}
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: "skipped_total"})
			if tc.counter {
				s.Skipped = c
			}
			s.Skip("port 0", "service", "ns/a")
			s.Skip("bad endpoint")
			got.Counted = testutil.ToFloat64(c)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestLockedWaitsForTheLock(t *testing.T) {
	type stats struct{ Services, Bytes int }
	var mu sync.Mutex
	v := stats{Services: 1}
	mu.Lock()
	read := make(chan stats)
	go func() { read <- Locked(&mu, &v) }()
	// What a sync under way writes is what the read sees: it waits.
	v = stats{Services: 3, Bytes: 120}
	mu.Unlock()
	if diff := cmp.Diff(stats{Services: 3, Bytes: 120}, <-read); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// The lock is free again.
	if !mu.TryLock() {
		t.Fatal("Locked left the mutex locked")
	}
}
