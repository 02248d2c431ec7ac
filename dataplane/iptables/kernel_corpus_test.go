package iptables

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest/kerneltest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/internal/netns"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// replayStats counts the service ports found programmed.
type replayStats struct {
	// served: ports of decoded Services; sliceChains and sliceRejects:
	// ports of made-up Services, by whether their slices' endpoints got a
	// chain or the port rejects for lack of them.
	served, sliceChains, sliceRejects int
}

// checkKernelServices requires every port the model kept in s to be in
// the kernel: a decoded Service's with its cluster IP rule and the service
// chain it jumps to (it has a ready local endpoint), a made-up Service's
// with those or with the reject of a port without endpoints.
func checkKernelServices(t *testing.T, what string, ns *netns.NS, s *dataplane.State, served func(types.NamespacedName) bool, stats *replayStats) {
	t.Helper()
	save := "iptables-save"
	if s.Family == v1.IPv6Protocol {
		save = "ip6tables-save"
	}
	nat, filter := ns.MustRun(save, "-t", "nat"), ns.MustRun(save, "-t", "filter")
	for nn, ports := range s.Services.Services() {
		for _, sp := range ports {
			name := portComment(sp.Name)
			chain := serviceChainOf(nat, name) != ""
			switch {
			case served(nn) && !chain:
				t.Errorf("%s, %s: port %s, which has a ready endpoint, has no cluster IP rule", what, s.Family, name)
			case served(nn):
				stats.served++
			case chain:
				stats.sliceChains++
			case strings.Contains(filter, `"`+name+` has no endpoints"`):
				stats.sliceRejects++
			default:
				t.Errorf("%s, %s: port %s is not programmed", what, s.Family, name)
			}
		}
	}
}

// serviceChainOf returns the declared service chain (SVC or SVL) that the
// cluster IP rule of port name jumps to in the iptables-save text nat, ""
// if there is none.
func serviceChainOf(nat, name string) string {
	for line := range strings.Lines(nat) {
		if !strings.HasPrefix(line, "-A "+DefaultChainPrefix+"SERVICES ") || !strings.Contains(line, `"`+name+` cluster IP"`) {
			continue
		}
		_, target, _ := strings.Cut(strings.TrimSpace(line), " -j ")
		if (strings.HasPrefix(target, DefaultChainPrefix+kindSVC) || strings.HasPrefix(target, DefaultChainPrefix+kindSVL)) &&
			strings.Contains(nat, "\n:"+target+" ") {
			return target
		}
	}
	return ""
}

// portComment is how the rules' comments name a port.
func portComment(pn servicemodel.PortName) string {
	if pn.Port == "" {
		return pn.NamespacedName.String()
	}
	return pn.NamespacedName.String() + ":" + pn.Port
}

// TestKernelFuzzCorporaAccepted replays the model's checked-in fuzz corpora
// through the real iptables-restore of both families
// (kerneltest.ReplayCorpora): every entry at once, then each entry alone,
// which the same dataplanes program as partial syncs. Beyond the replay's
// own checks, a second Sync of the same State must do nothing, every
// service port the model kept must be programmed, the rules gauge must
// count the kernel's rules, and each partial sync must leave the rules a
// full sync of its State writes.
func TestKernelFuzzCorporaAccepted(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-restore", "ip6tables-save", "iptables")
	ref := netns.New(t, "corpusref")
	refs := map[v1.IPFamily]*nsDataplane{}
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		refs[fam] = newNSDataplane(t, ref, Config{Family: fam})
	}
	var stats replayStats
	check := func(t *testing.T, c kerneltest.CorpusSync) {
		ctx := t.Context()
		what, s, dp := c.What, c.State, c.Dataplane.(*Dataplane)
		if full := dp.LastSync().Full; full == c.Partial {
			t.Errorf("%s, %s: full sync %v, want %v", what, s.Family, full, !c.Partial)
		}
		if err := c.Node.Do(func() error { return dp.Sync(ctx, s) }); err != nil || dp.Stats() != (SyncStats{}) {
			t.Errorf("%s, %s: the same State again: %v, %+v; want a sync doing nothing", what, s.Family, err, dp.LastSync())
		}
		checkKernelServices(t, what, c.Node, s, c.Builder.Served, &stats)
		checkRuleGauge(t, what, c.Node, dp, s.Family == v1.IPv6Protocol)
		if !c.Partial {
			return
		}
		forceFull(refs[s.Family].Dataplane)
		if err := refs[s.Family].Sync(ctx, s); err != nil {
			t.Fatalf("%s, %s: full sync: %v", what, s.Family, err)
		}
		v6 := s.Family == v1.IPv6Protocol
		if diff := cmpDiff(kernelRules(t, ref, v6), kernelRules(t, c.Node, v6)); diff != "" {
			t.Errorf("%s, %s: the partial sync left other rules than a full one (-full +partial):\n%s", what, s.Family, diff)
		}
	}
	report := kerneltest.ReplayCorpora(t, kerneltest.CorpusConfig{
		Root: "../..",
		Harness: kerneltest.Config{New: func(family v1.IPFamily) (dataplane.Dataplane, error) {
			r, err := xtables.NewExecRunner(xtables.ExecConfig{Family: family})
			if err != nil {
				return nil, err
			}
			return New(Config{Family: family, Runner: r, Logger: logr.Discard()})
		}},
		Check: check,
	})
	if stats.served == 0 || stats.sliceChains == 0 {
		t.Errorf("programmed %+v: the decoded Services or the slices' endpoints never reached the kernel", stats)
	}
	t.Logf("%s; service ports found programmed: %+v", report, stats)
}

// checkRuleGauge requires the rules gauge of d to count the rules the
// kernel holds in d's chains.
func checkRuleGauge(t *testing.T, what string, ns *netns.NS, d *Dataplane, v6 bool) {
	t.Helper()
	kernel := map[string]float64{"nat": 0, "filter": 0}
	for key, rules := range kernelRules(t, ns, v6) {
		table, chain, _ := strings.Cut(key, " ")
		if strings.HasPrefix(chain, DefaultChainPrefix) && chain != DefaultChainPrefix+"PROXY-CANARY" {
			kernel[table] += float64(len(rules))
		}
	}
	if diff := cmp.Diff(kernel, gauges(d.metrics.rules)); diff != "" {
		t.Errorf("%s, v6=%v: rules gauge differs from the kernel (-kernel +gauge):\n%s", what, v6, diff)
	}
}
