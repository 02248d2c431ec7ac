package informer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// logLines is a logger recording each line, without timestamps.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

func (l *logLines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func TestGuardCall(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	unavailable := apierrors.NewServiceUnavailable("starting")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, "", errors.New("no"))
	gone := apierrors.NewResourceExpired("too old resource version")
	for _, tc := range []struct {
		name string
		errs []error // what the calls return, in order; then success
		max  time.Duration
		// wantCalls is how often fn runs; wantWaits the waits' upper bounds.
		wantCalls int
		wantErr   error
		wantWaits []time.Duration
		wantLogs  []string
	}{{
		name:      "success",
		wantCalls: 1,
	}, {
		name:      "unreachable, then back",
		errs:      []error{refused, refused, refused, unavailable, unavailable, apierrors.NewTooManyRequests("init", 1)},
		max:       time.Second,
		wantCalls: 7,
		wantWaits: []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second, time.Second},
		wantLogs: []string{
			`"level"=0 "msg"="API server unreachable; retrying" "source"="informers" "retryMax"="1s" "err"="dial tcp: connection refused"`,
			`"level"=0 "msg"="API server reachable again" "source"="informers"`,
		},
	}, {
		name:      "forbidden is returned and said once",
		errs:      []error{forbidden},
		wantCalls: 1,
		wantErr:   forbidden,
		wantLogs: []string{
			`"msg"="The API server forbids a call the source needs; it waits until permission is granted" "error"="endpointslices.discovery.k8s.io is forbidden: no" "source"="informers" "verb"="watch" "resource"="endpointslices.discovery.k8s.io"`,
		},
	}, {
		name:      "resource version too old is the reflector's to handle",
		errs:      []error{gone},
		wantCalls: 1,
		wantErr:   gone,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logLines
			g := newGuard(logs.logger(), tc.max)
			var waits []time.Duration
			g.after = func(d time.Duration) <-chan time.Time {
				waits = append(waits, d)
				c := make(chan time.Time, 1)
				c <- time.Time{}
				return c
			}
			calls := 0
			_, err := call(context.Background(), g, "watch", "endpointslices.discovery.k8s.io", func() (int, error) {
				calls++
				if calls <= len(tc.errs) {
					return 0, tc.errs[calls-1]
				}
				return 1, nil
			})
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if calls != tc.wantCalls {
				t.Errorf("fn ran %d times, want %d", calls, tc.wantCalls)
			}
			if len(waits) != len(tc.wantWaits) {
				t.Fatalf("waited %v, want %d waits", waits, len(tc.wantWaits))
			}
			for i, w := range waits {
				// Jitter waits between half the step and the step.
				if w < tc.wantWaits[i]/2 || w > tc.wantWaits[i] {
					t.Errorf("wait %d = %v, want within [%v, %v]", i, w, tc.wantWaits[i]/2, tc.wantWaits[i])
				}
			}
			if diff := cmp.Diff(tc.wantLogs, logs.get()); diff != "" {
				t.Errorf("logs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGuardSaysForbiddenOnce(t *testing.T) {
	var logs logLines
	g := newGuard(logs.logger(), 0)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("no"))
	for range 3 {
		for _, verb := range []string{"list", "watch"} {
			_, _ = call(context.Background(), g, verb, "services", func() (int, error) { return 0, forbidden })
		}
	}
	_, _ = call(context.Background(), g, "list", "services", func() (int, error) { return 0, nil })
	var got []string
	for _, l := range logs.get() {
		got = append(got, l[strings.Index(l, `"verb"`):])
	}
	want := []string{
		`"verb"="list" "resource"="services"`,
		`"verb"="watch" "resource"="services"`,
		`"verb"="list" "resource"="services"`, // granted
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("logs (-want +got):\n%s", diff)
	}
}

func TestGuardStopsWithContext(t *testing.T) {
	g := newGuard(logr.Discard(), 0)
	ctx, cancel := context.WithCancel(context.Background())
	g.after = func(time.Duration) <-chan time.Time {
		cancel()
		return nil
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	calls := 0
	_, err := call(ctx, g, "list", "nodes", func() (int, error) { calls++; return 0, refused })
	if !errors.Is(err, syscall.ECONNREFUSED) || calls != 1 {
		t.Errorf("got err %v after %d calls, want the refusal after 1", err, calls)
	}
}

// TestSourceSaysWhatItLacks runs the source against a clientset that
// forbids listing EndpointSlices: it must name the verb, the resource and
// itself, and not sync.
func TestSourceSaysWhatItLacks(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, "",
			fmt.Errorf(`User "system:serviceaccount:kube-system:proxykit-nodeagent" cannot list resource "endpointslices"`))
	})
	var logs logLines
	src := New(client, Config{NodeName: "n1", Logger: logs.logger()})
	ctx, cancel := context.WithCancel(context.Background())
	rec := newRecorder()
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, rec) }()
	want := `"source"="informers" "verb"="list" "resource"="endpointslices.discovery.k8s.io"`
	for i := 0; ; i++ {
		found := false
		for _, l := range logs.get() {
			found = found || strings.Contains(l, want)
		}
		if found {
			break
		}
		if i == 500 {
			t.Fatalf("no log line with %s; got %q", want, logs.get())
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-rec.synced:
		t.Error("source synced without EndpointSlices")
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
