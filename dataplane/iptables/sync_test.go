package iptables

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/xtables"
)

// TestTraceMatchesLookup is the property test: for random States and
// random packets, tracing the rendered rules gives State.Lookup's verdict.
func TestTraceMatchesLookup(t *testing.T) {
	seen := map[string]int{}
	defer func() {
		// The generator must keep reaching every kind of verdict, or the
		// property proves little.
		for _, k := range []string{"NotAService", "Accept", "Reject", "Drop", "DNAT", "masquerade", "hairpin", "affinity", "unmasqueraded"} {
			if seen[k] == 0 {
				t.Errorf("no packet got a %s verdict: %v", k, seen)
			}
		}
	}()
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 7))
		svcs := map[int]genService{}
		n := 1 + r.IntN(8)
		for i := range n {
			svcs[i] = genSvc(r, i)
		}
		s := makeState(genSettings(r), svcs)
		d, fake := newFake(t, Config{})
		if err := d.Sync(t.Context(), s); err != nil {
			t.Fatalf("seed %d: Sync: %v", seed, err)
		}
		for range 200 {
			p := genPacket(r, n)
			want, got := s.Lookup(p), fake.Trace(p, s.Node.IPs)
			seen[want.Action.String()]++
			switch {
			case len(want.Hairpin) > 0:
				seen["hairpin"]++
			case want.Masquerade:
				seen["masquerade"]++
			case want.Action == dataplane.DNAT:
				seen["unmasqueraded"]++
			}
			if want.Affinity {
				seen["affinity"]++
			}
			if diff := dataplanetest.DiffVerdict(want, got); diff != "" {
				t.Fatalf("seed %d: %+v: trace differs from Lookup (-lookup +trace):\n%s\nlookup says: %s\nrules:\n%s",
					seed, p, diff, want.Reason, dump(fake))
			}
		}
	}
}

// TestPartialSyncEqualsFullRender applies random changes one at a time and
// requires the kernel to hold exactly what a first full sync of the same
// State would write, while every sync after the first stays partial.
func TestPartialSyncEqualsFullRender(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 11))
		settings := genSettings(r)
		svcs := map[int]genService{}
		for i := range 6 {
			svcs[i] = genSvc(r, i)
		}
		d, fake := newFake(t, Config{})
		ctx := t.Context()
		if err := d.Sync(ctx, makeState(settings, svcs)); err != nil {
			t.Fatal(err)
		}
		for step := range 25 {
			switch i := r.IntN(10); r.IntN(3) {
			case 0:
				delete(svcs, i)
			default:
				svcs[i] = genSvc(r, i)
			}
			s := makeState(settings, svcs)
			if err := d.Sync(ctx, s); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if st := d.LastSync(); st.Full {
				t.Fatalf("seed %d step %d: sync was full", seed, step)
			}
			if diff := cmp.Diff(freshTables(t, Config{}, s), dump(fake)); diff != "" {
				t.Fatalf("seed %d step %d: kernel differs from a fresh render (-fresh +kernel):\n%s", seed, step, diff)
			}
		}
	}
}

// TestPartialSyncSize checks that a one-endpoint change writes only that
// service's chains and a constant number of lines, whatever the number of
// services, through both the ChangedSince path and the compare-all path.
func TestPartialSyncSize(t *testing.T) {
	for _, n := range []int{10, 300} {
		b, st := benchBuilder(n, 3)
		d, fake := newFake(t, Config{})
		ctx := t.Context()
		if err := d.Sync(ctx, st); err != nil {
			t.Fatal(err)
		}
		st = changeOneEndpoint(b, n/2, 1)
		if _, ok := st.ChangedSince(st.Generation - 1); !ok {
			t.Fatalf("Builder state cannot tell what changed")
		}
		if err := d.Sync(ctx, st); err != nil {
			t.Fatal(err)
		}
		stats := d.LastSync()
		restores := fake.Restores()
		last := string(restores[len(restores)-1])
		if stats.Full || stats.Services != 1 {
			t.Errorf("n=%d: stats %+v, want a partial sync of 1 service", n, stats)
		}
		// The SVC chain is rewritten, one SEP chain replaced: header and
		// COMMIT, 3 chain lines, the SVC chain's rules, 2 SEP rules, -X.
		if lines := strings.Count(last, "\n"); lines > 14 {
			t.Errorf("n=%d: partial restore has %d lines:\n%s", n, lines, last)
		}
		if diff := cmp.Diff(freshTables(t, Config{}, st), dump(fake)); diff != "" {
			t.Errorf("n=%d: kernel differs from a fresh render:\n%s", n, diff)
		}
	}
}

// TestNoChangeWritesNothing: syncing the same State, or an equal one,
// runs no restore.
func TestNoChangeWritesNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	svcs := map[int]genService{0: genSvc(r, 0), 1: genSvc(r, 1)}
	s := makeState(genSettings(r), svcs)
	d, fake := newFake(t, Config{})
	for range 2 {
		if err := d.Sync(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Sync(t.Context(), makeState(s.Settings, svcs)); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Restores()); n != 1 {
		t.Errorf("%d restores, want only the first", n)
	}
}

func TestFailedRestoreKeepsRulesAndForcesFullSync(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	svcs := map[int]genService{0: genSvc(r, 0), 1: genSvc(r, 1)}
	settings := genSettings(r)
	d, fake := newFake(t, Config{})
	ctx := t.Context()
	if err := d.Sync(ctx, makeState(settings, svcs)); err != nil {
		t.Fatal(err)
	}
	before := dump(fake)
	svcs[2] = genSvc(r, 2)
	svcs[2].ports[0].NodePort = 30999
	fake.Fail = func([]byte) error { return &xtables.RestoreError{Line: 3, Output: "iptables-restore: line 3 failed"} }
	err := d.Sync(ctx, makeState(settings, svcs))
	var re *xtables.RestoreError
	if !errors.As(err, &re) || !re.Partial {
		t.Fatalf("Sync = %v, want a partial *xtables.RestoreError", err)
	}
	if got := dump(fake); got != before {
		t.Errorf("a rejected restore changed the tables")
	}
	fake.Fail = nil
	s := makeState(settings, svcs)
	if err := d.Sync(ctx, s); err != nil {
		t.Fatal(err)
	}
	if !d.LastSync().Full {
		t.Errorf("the sync after a failure was not full")
	}
	if diff := cmp.Diff(freshTables(t, Config{}, s), dump(fake)); diff != "" {
		t.Errorf("tables after recovery (-want +got):\n%s", diff)
	}
}

// TestRestartReconciles: a new Dataplane on tables left by an earlier run
// (with chains of services since deleted) and by others removes its stale
// chains, duplicates nothing, and leaves foreign chains alone.
func TestRestartReconciles(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	svcs := map[int]genService{}
	for i := range 5 {
		svcs[i] = genSvc(r, i)
		svcs[i].ports[0].NodePort = uint16(31000 + i)
	}
	settings := genSettings(r)
	d1, fake := newFake(t, Config{})
	ctx := t.Context()
	if err := d1.Sync(ctx, makeState(settings, svcs)); err != nil {
		t.Fatal(err)
	}
	foreign := "*nat\n:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]\n:OTHER - [0:0]\n-A OTHER -j RETURN\n-A PREROUTING -j OTHER\nCOMMIT\n"
	if err := fake.Restore(ctx, xtables.RestoreBytes(foreign)); err != nil {
		t.Fatal(err)
	}
	delete(svcs, 1)
	delete(svcs, 3)
	s := makeState(settings, svcs)
	d2, err := New(Config{Runner: fake, Logger: d1.log})
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Sync(ctx, s); err != nil {
		t.Fatal(err)
	}
	got := fake.Ruleset()
	if err := fresh(t, s, foreign); got.Save("nat") == nil || string(got.Save("nat")) != err {
		t.Errorf("nat after restart (-want +got):\n%s", cmp.Diff(err, string(got.Save("nat"))))
	}
}

// fresh is the nat table a first sync of s writes over the foreign rules.
func fresh(t *testing.T, s *dataplane.State, foreign string) string {
	d, fake := newFake(t, Config{})
	if err := fake.Restore(t.Context(), xtables.RestoreBytes(foreign)); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return string(fake.Ruleset().Save("nat"))
}

// TestDryRun: a Dataplane on a FakeRunner prints what it would restore,
// and Render is deterministic and equals that input.
func TestDryRun(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	svcs := map[int]genService{}
	for i := range 8 {
		svcs[i] = genSvc(r, i)
	}
	s := makeState(genSettings(r), svcs)
	var out bytes.Buffer
	fake := xtables.NewFakeRunner()
	fake.Output = &out
	d, err := New(Config{Runner: fake})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	a, err := d.Render(s)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.Render(makeState(s.Settings, svcs))
	if !bytes.Equal(a, b) {
		t.Errorf("Render is not deterministic")
	}
	var body []string
	for _, l := range strings.SplitAfter(string(a), "\n") {
		if !strings.HasPrefix(l, "#") {
			body = append(body, l)
		}
	}
	if diff := cmp.Diff(strings.Join(body, ""), out.String()); diff != "" {
		t.Errorf("Render differs from the dry-run sync input:\n%s", diff)
	}
	if err := xtables.NewRuleset().Apply(a); err != nil {
		t.Errorf("rendered input does not apply: %v", err)
	}
}

func TestCleanupRemovesOnlyOwnChains(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	svcs := map[int]genService{0: genSvc(r, 0), 1: genSvc(r, 1)}
	settings := genSettings(r)
	fake := xtables.NewFakeRunner()
	foreign := "*filter\n:KUBE-FORWARD - [0:0]\n-A KUBE-FORWARD -j ACCEPT\n-A FORWARD -j KUBE-FORWARD\nCOMMIT\n"
	if err := fake.Restore(t.Context(), xtables.RestoreBytes(foreign)); err != nil {
		t.Fatal(err)
	}
	want := dump(fake)
	d, err := New(Config{Runner: fake})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(t.Context(), makeState(settings, svcs)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := d.Cleanup(t.Context()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, dump(fake)); diff != "" {
			t.Errorf("after Cleanup (-want +got):\n%s", diff)
		}
	}
}

func TestLargeClusterDropsEndpointComments(t *testing.T) {
	_, st := benchBuilder(120, 10)
	d, fake := newFake(t, Config{})
	if err := d.Sync(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	for _, rule := range fake.Ruleset().Rules("nat", d.names.endpointChain("ns0/svc0:p80tcp", "10.1.0.1:8080")) {
		if strings.Contains(rule, "--comment") {
			t.Errorf("endpoint rule %q has a comment in a cluster of 1200 endpoints", rule)
		}
	}
}
