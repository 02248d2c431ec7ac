package ipvstest

import (
	"errors"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	mobyipvs "github.com/moby/ipvs"
	"golang.org/x/sys/unix"
)

// TestFailNext requires an injected failure to answer exactly the next
// call, whichever it is, and to change nothing.
func TestFailNext(t *testing.T) {
	const populated = "TCP 10.0.0.1:80 rr\n  -> 10.1.0.1:8080 weight 1"
	injected := errors.New("injected")
	vs := &mobyipvs.Service{Address: net.ParseIP("10.0.0.1"), Protocol: unix.IPPROTO_TCP, Port: 80, SchedName: "rr", AddressFamily: unix.AF_INET}
	dest := &mobyipvs.Destination{Address: net.ParseIP("10.1.0.1"), Port: 8080, Weight: 1}
	for _, tc := range []struct {
		name string
		call func(f *FakeIPVS) error
		want string
	}{
		{"NewService", func(f *FakeIPVS) error { return f.NewService(vs) }, ""},
		{"DelService", func(f *FakeIPVS) error { return f.DelService(vs) }, populated},
		{"NewDestination", func(f *FakeIPVS) error { return f.NewDestination(vs, dest) }, populated},
		{"GetServices", func(f *FakeIPVS) error { _, err := f.GetServices(); return err }, populated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFakeIPVS()
			if tc.want != "" {
				if err := f.NewService(vs); err != nil {
					t.Fatal(err)
				}
				if err := f.NewDestination(vs, dest); err != nil {
					t.Fatal(err)
				}
			}
			f.FailNext(injected)
			calls := f.Calls()
			if err := tc.call(f); !errors.Is(err, injected) {
				t.Fatalf("first call after FailNext = %v; want the injected error", err)
			}
			if diff := cmp.Diff(tc.want, f.Dump()); diff != "" {
				t.Errorf("the failed call changed the table (-want +got):\n%s", diff)
			}
			if got := f.Calls() - calls; got != 1 {
				t.Errorf("the failed call counted %d calls; want 1", got)
			}
			if _, err := f.GetServices(); err != nil {
				t.Errorf("the call after the failed one = %v; want no error", err)
			}
		})
	}
}
