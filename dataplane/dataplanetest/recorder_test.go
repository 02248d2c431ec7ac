package dataplanetest_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
)

// TestRecorderConformance runs the whole suite against the Recorder, which
// answers with Lookup: it checks the tables against the specification and
// the suite's own plumbing.
func TestRecorderConformance(t *testing.T) {
	dataplanetest.Run(t, func(t *testing.T) dataplanetest.Harness {
		return dataplanetest.NewRecorder("recorder")
	})
}

func TestRecorderKernelSafeSubset(t *testing.T) {
	subset := dataplanetest.Filter(dataplanetest.Scenarios(), dataplanetest.HasTag(dataplanetest.TagKernelSafe))
	dataplanetest.RunScenarios(t, subset, func(t *testing.T) dataplanetest.Harness {
		return dataplanetest.NewRecorder("recorder")
	})
}

func TestRecorder(t *testing.T) {
	ctx := context.Background()
	r := dataplanetest.NewRecorder("rec")
	p := dataplanetest.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolTCP)
	s1, s2 := &dataplane.State{Generation: 1}, &dataplane.State{Generation: 2}
	boom := errors.New("boom")

	if v, err := r.Trace(ctx, p); err != nil || v.Action != dataplane.NotAService {
		t.Errorf("Trace before any Sync = %v, %v; want NotAService", v.Action, err)
	}
	if err := r.Sync(ctx, s1); err != nil {
		t.Fatal(err)
	}
	r.FailNext(2, boom)
	for range 2 {
		if err := r.Sync(ctx, s2); !errors.Is(err, boom) {
			t.Errorf("Sync = %v, want %v", err, boom)
		}
	}
	if got := r.Programmed(); got != s1 {
		t.Errorf("after failed Syncs Programmed = %v, want the first State", got)
	}
	if err := r.Sync(ctx, nil); err == nil {
		t.Error("Sync(nil) succeeded")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.Sync(cancelled, s2); !errors.Is(err, context.Canceled) {
		t.Errorf("Sync with a cancelled context = %v", err)
	}
	if err := r.Sync(ctx, s2); err != nil {
		t.Fatal(err)
	}
	if got := r.Programmed(); got != s2 {
		t.Errorf("Programmed = %v, want the second State", got)
	}
	if err := r.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Cleanup(cancelled); err == nil {
		t.Error("Cleanup with a cancelled context succeeded")
	}
	if _, err := r.Trace(cancelled, p); err == nil {
		t.Error("Trace with a cancelled context succeeded")
	}

	type call struct {
		Gen uint64
		Err string
	}
	var got []call
	for _, c := range r.Syncs() {
		var gen uint64
		if c.State != nil {
			gen = c.State.Generation
		}
		var msg string
		if c.Err != nil {
			msg = c.Err.Error()
		}
		got = append(got, call{gen, msg})
	}
	want := []call{
		{1, ""},
		{2, "boom"},
		{2, "boom"},
		{0, "dataplanetest: Sync of a nil State"},
		{2, "context canceled"},
		{2, ""},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Syncs (-want +got):\n%s", d)
	}
	if r.Programmed() != nil || r.Cleanups() != 1 || r.Name() != "rec" {
		t.Errorf("Programmed = %v, Cleanups = %d, Name = %q; want nil, 1, rec", r.Programmed(), r.Cleanups(), r.Name())
	}
}

func TestRecorderConcurrent(t *testing.T) {
	ctx := context.Background()
	r := dataplanetest.NewRecorder("rec")
	p := dataplanetest.MakePacket(dataplane.FromLocalPod, "10.0.0.2", "172.30.0.41:80", v1.ProtocolTCP)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				_ = r.Sync(ctx, &dataplane.State{})
				_, _ = r.Trace(ctx, p)
				r.FailNext(1, nil)
				_ = r.Cleanup(ctx)
			}
		})
	}
	wg.Wait()
	if n := len(r.Syncs()); n != 100 {
		t.Errorf("%d Syncs recorded, want 100", n)
	}
}

func TestFilterAndTags(t *testing.T) {
	all := dataplanetest.Scenarios()
	count := func(ss []dataplanetest.Scenario) (n int) {
		for _, s := range ss {
			n += len(s.Packets)
		}
		return n
	}
	if n := count(all); n < 200 {
		t.Errorf("only %d packet cases", n)
	}
	for _, s := range all {
		if s.Name == "" || len(s.Packets) == 0 {
			t.Errorf("scenario %q has no name or no packets", s.Name)
		}
		for _, c := range s.Packets {
			safe := dataplanetest.HasTag(dataplanetest.TagKernelSafe)(s, c)
			spoofed := dataplanetest.HasTag(dataplanetest.TagSpoofedSource)(s, c)
			if wantSafe := !spoofed && c.Want.Action != dataplane.Accept; safe != wantSafe {
				t.Errorf("%s/%s: kernel-safe = %v, want %v", s.Name, c.Name, safe, wantSafe)
			}
			if c.Packet.Src.Is6() != dataplanetest.HasTag(dataplanetest.TagIPv6)(s, c) {
				t.Errorf("%s/%s: IPv6 tag does not match the packet", s.Name, c.Name)
			}
		}
	}
	safe := dataplanetest.Filter(all, dataplanetest.HasTag(dataplanetest.TagKernelSafe))
	unsafe := dataplanetest.Filter(all, func(s dataplanetest.Scenario, c dataplanetest.PacketCase) bool {
		return !dataplanetest.HasTag(dataplanetest.TagKernelSafe)(s, c)
	})
	if count(safe)+count(unsafe) != count(all) || count(unsafe) == 0 {
		t.Errorf("Filter split %d cases into %d and %d", count(all), count(safe), count(unsafe))
	}
	if got := dataplanetest.Filter(all, func(dataplanetest.Scenario, dataplanetest.PacketCase) bool { return false }); got != nil {
		t.Errorf("Filter keeping nothing = %d scenarios", len(got))
	}
	if count(dataplanetest.Scenarios()) != count(all) {
		t.Error("Filter modified its input")
	}
}

func TestDiffVerdict(t *testing.T) {
	a := dataplane.Verdict{Action: dataplane.DNAT, Endpoints: dataplanetest.AddrPorts("10.0.0.1:80"), Reason: "x"}
	b := a
	b.Reason = "y"
	if d := dataplanetest.DiffVerdict(a, b); d != "" {
		t.Errorf("Reason compared:\n%s", d)
	}
	if d := dataplanetest.DiffVerdict(dataplane.Verdict{Hairpin: nil}, dataplane.Verdict{Hairpin: dataplanetest.AddrPorts()}); d != "" {
		t.Errorf("nil and empty differ:\n%s", d)
	}
	b.Masquerade = true
	if dataplanetest.DiffVerdict(a, b) == "" {
		t.Error("Masquerade not compared")
	}
}
