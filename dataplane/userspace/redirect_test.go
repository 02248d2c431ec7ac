package userspace

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/iptables"
	v1 "k8s.io/api/core/v1"
)

var redirectPort = regexp.MustCompile(`--to-ports \d+`)

// restores returns the restore inputs fake received after the first
// skip, with the forwarders' ports blanked.
func restores(fake *iptables.FakeRunner, skip int) []string {
	var out []string
	for _, r := range fake.Restores()[skip:] {
		out = append(out, redirectPort.ReplaceAllString(string(r), "--to-ports P"))
	}
	return out
}

// TestRedirectSyncWritesOnlyChanges checks the rules of redirect mode: a
// first Sync writes the chains, an endpoint change writes nothing, a
// service losing its endpoints swaps its REDIRECT for a REJECT, and a
// removed service takes its rule along.
func TestRedirectSyncWritesOnlyChanges(t *testing.T) {
	bk := newBackends(t)
	c := newCluster()
	web := c.service("web", "10.96.0.10", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
	}, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1"}, "http/TCP/8080")
	c.service("dns", "10.96.0.11", nil, "dns/UDP/53")
	c.endpoints("dns", []string{"10.0.0.1"}, "dns/UDP/53")
	fake := iptables.NewFakeRunner()
	d := newDataplane(t, bk, Config{Redirect: &RedirectConfig{Runner: fake}})

	steps := []struct {
		name   string
		change func()
		want   []string
	}{{
		name:   "first sync",
		change: func() {},
		want: []string{"*nat\n" +
			":PKU-SERVICES - [0:0]\n" +
			":PKU-NODEPORTS - [0:0]\n" +
			"-A PKU-SERVICES -m addrtype --dst-type LOCAL -j PKU-NODEPORTS\n" +
			"-A PKU-NODEPORTS -d 127.0.0.0/8 -j RETURN\n" +
			`-A PKU-NODEPORTS -m comment --comment "ns/web:http node port" -p tcp -m tcp --dport 30080 -j REDIRECT --to-ports P` + "\n" +
			`-I PKU-SERVICES 1 -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports P` + "\n" +
			`-I PKU-SERVICES 1 -m comment --comment "ns/dns:dns cluster IP" -d 10.96.0.11/32 -p udp -m udp --dport 53 -j REDIRECT --to-ports P` + "\n" +
			"COMMIT\n" +
			"*filter\n" +
			":PKU-REJECT - [0:0]\n" +
			"COMMIT\n"},
	}, {
		name:   "an endpoint change",
		change: func() { c.endpoints("web", []string{"10.0.0.2"}, "http/TCP/8080") },
	}, {
		name:   "no endpoints",
		change: func() { c.endpoints("web", nil, "http/TCP/8080") },
		want: []string{"*nat\n" +
			`-D PKU-NODEPORTS -m comment --comment "ns/web:http node port" -p tcp -m tcp --dport 30080 -j REDIRECT --to-ports P` + "\n" +
			`-D PKU-SERVICES -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports P` + "\n" +
			"COMMIT\n" +
			"*filter\n" +
			`-A PKU-REJECT -m comment --comment "ns/web:http node port" -m addrtype --dst-type LOCAL -p tcp -m tcp --dport 30080 -j REJECT` + "\n" +
			`-A PKU-REJECT -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REJECT` + "\n" +
			"COMMIT\n"},
	}, {
		name:   "service removed",
		change: func() { c.b.UpdateService(web, nil) },
		want: []string{"*filter\n" +
			`-D PKU-REJECT -m comment --comment "ns/web:http node port" -m addrtype --dst-type LOCAL -p tcp -m tcp --dport 30080 -j REJECT` + "\n" +
			`-D PKU-REJECT -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REJECT` + "\n" +
			"COMMIT\n"},
	}}
	for _, s := range steps {
		seen := len(fake.Restores())
		s.change()
		mustSync(t, d, c.build())
		got := restores(fake, seen)
		for i := range got {
			got[i] = sortRuleLines(got[i])
		}
		for i := range s.want {
			s.want[i] = sortRuleLines(s.want[i])
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("%s: restore input (-want +got):\n%s", s.name, diff)
		}
	}

	if err := d.Cleanup(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"nat", "filter"} {
		save, err := fake.Save(t.Context(), table)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(save), "PKU-") {
			t.Errorf("after Cleanup, %s holds:\n%s", table, save)
		}
	}
}

// sortRuleLines orders the rule lines of each table, which follow map
// order within one restore.
func sortRuleLines(in string) string {
	var out, rules []string
	flush := func() {
		slices.Sort(rules)
		out = append(out, rules...)
		rules = nil
	}
	for _, l := range strings.Split(in, "\n") {
		if strings.HasPrefix(l, "-I ") || strings.HasPrefix(l, "-D ") || (strings.HasPrefix(l, "-A ") && strings.Contains(l, "comment")) {
			rules = append(rules, l)
			continue
		}
		flush()
		out = append(out, l)
	}
	flush()
	return strings.Join(out, "\n")
}
