package report

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/proxykit/proxykit/test/e2e/suite"
)

// Marks in the tests × runs table.
const (
	markPass = "✓"
	markFail = "✗"
	markSkip = "–"
)

// Markdown renders REPORT.md from runs (in Load's order): the header, a
// summary per node count, the tests × runs table, each failure's message,
// the explained differences and those nothing explains, and the tests
// that cannot run here. It depends on nothing but runs, so the same runs
// always give the same bytes.
func Markdown(runs []Run) []byte {
	var b strings.Builder
	writeHeader(&b, runs)
	if len(runs) == 0 {
		b.WriteString("No runs are stored yet: `go -C test/e2e run .` (README.md) runs the suite and writes them.\n\n")
		writeUnrunnable(&b, nil)
		return []byte(b.String())
	}
	writeSummary(&b, runs)
	n := writeTable(&b, runs)
	writeFailures(&b, n)
	writeExplained(&b, runs)
	writeUnexplained(&b, runs)
	writeUnrunnable(&b, runs)
	return []byte(b.String())
}

func writeHeader(b *strings.Builder, runs []Run) {
	b.WriteString("# Kubernetes' e2e tests for service proxies: proxykit and kube-proxy\n\n")
	b.WriteString("<!-- Generated from results/*.json by `go -C test/e2e run .` (or `-report-only`); edits are overwritten. -->\n\n")
	fmt.Fprintf(b, "The upstream suite (%s, `test/e2e`: %s) against proxykit's node agent "+
		"in each mode, and against kube-proxy %s as the baseline, on a real cluster of one, two or three "+
		"nodes that this module builds (README.md says how, and how to rerun it).\n\n",
		suite.Kubernetes, groupList(), suite.KubernetesVersion)
	if len(runs) == 0 {
		return
	}
	latest := runs[0].Date
	commits, machines := map[string]int{}, map[string]int{}
	for _, r := range runs {
		if r.Date.After(latest) {
			latest = r.Date
		}
		commits[r.Commit]++
		machines[machine(r)]++
	}
	fmt.Fprintf(b, "- Latest run: %s\n", latest.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(b, "- Commit: %s\n", counted(commits, "`%s`"))
	fmt.Fprintf(b, "- Machine: %s\n\n", counted(machines, "%s"))
}

func groupList() string {
	var quoted []string
	for _, g := range suite.Groups() {
		quoted = append(quoted, "`"+g+"`")
	}
	return strings.Join(quoted[:len(quoted)-1], ", ") + " and " + quoted[len(quoted)-1]
}

func machine(r Run) string {
	if r.Kernel == "" {
		return "unknown"
	}
	return fmt.Sprintf("Linux %s, %d cores", r.Kernel, r.Cores)
}

// counted lists the keys of m, most frequent first, with how many runs
// each when there is more than one.
func counted(m map[string]int, format string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf(format, k)
		if len(keys) > 1 {
			parts[i] += fmt.Sprintf(" (%s)", plural(m[k], "run"))
		}
	}
	return strings.Join(parts, ", ")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func nodesLabel(n int) string { return plural(n, "node") }

func runLabel(r Run) string {
	if r.Result.Focus == suite.FocusConformance {
		return r.Proxy + " (conformance)"
	}
	return r.Proxy
}

func writeSummary(b *strings.Builder, runs []Run) {
	b.WriteString("## Summary\n")
	for i, r := range runs {
		if i == 0 || runs[i-1].Nodes != r.Nodes {
			fmt.Fprintf(b, "\n### %s\n\n", nodesLabel(r.Nodes))
			b.WriteString("| run | passed | failed | skipped | time | commit | date |\n|---|--:|--:|--:|--:|---|---|\n")
		}
		p, f, s := r.Result.Count()
		fmt.Fprintf(b, "| %s | %d | %d | %d | %s | `%s` | %s |\n",
			runLabel(r), p, f, s, duration(r.Result.Duration), r.Commit, r.Date.UTC().Format("2006-01-02 15:04"))
		for _, sf := range r.Result.SuiteFailures {
			fmt.Fprintf(b, "| ↳ suite failure: %s | | | | | | |\n", cell(sf))
		}
	}
	b.WriteString("\n")
}

// duration prints a spec's or run's time to a useful precision.
func duration(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%.0fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// cell makes text safe in a table cell: one line, no column separators,
// nothing a renderer takes for an HTML tag.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "<", "&lt;")
	return strings.Join(strings.Fields(s), " ")
}

// notes numbers the skip reasons and failures the table points to.
type notes struct {
	skips    []string
	failures []failureNote
}

type failureNote struct {
	spec string
	run  Run
	s    suite.Spec
}

func (n *notes) skip(reason string) string {
	i := slices.Index(n.skips, reason)
	if i < 0 {
		n.skips = append(n.skips, reason)
		i = len(n.skips) - 1
	}
	return fmt.Sprintf("S%d", i+1)
}

func (n *notes) failure(r Run, s suite.Spec) string {
	n.failures = append(n.failures, failureNote{spec: s.Name, run: r, s: s})
	return fmt.Sprintf("F%d", len(n.failures))
}

// specIndex maps each run's specs by name.
func specIndex(runs []Run) []map[string]suite.Spec {
	idx := make([]map[string]suite.Spec, len(runs))
	for i, r := range runs {
		idx[i] = map[string]suite.Spec{}
		for _, s := range r.Result.Specs {
			idx[i][s.Name] = s
		}
	}
	return idx
}

// specNames returns every spec any run holds, by group in report order,
// then by name.
func specNames(runs []Run) []string {
	seen := map[string]bool{}
	var names []string
	for _, r := range runs {
		for _, s := range r.Result.Specs {
			if !seen[s.Name] {
				seen[s.Name] = true
				names = append(names, s.Name)
			}
		}
	}
	slices.SortFunc(names, compareSpecs)
	return names
}

func compareSpecs(a, b string) int {
	if ga, gb := groupRank(a), groupRank(b); ga != gb {
		return ga - gb
	}
	return strings.Compare(a, b)
}

func groupRank(name string) int {
	if i := slices.Index(suite.Groups(), suite.GroupOf(name)); i >= 0 {
		return i
	}
	return len(suite.Groups())
}

func writeTable(b *strings.Builder, runs []Run) *notes {
	n := &notes{}
	idx := specIndex(runs)
	b.WriteString("## Tests × runs\n\n")
	b.WriteString(markPass + " passed (its time), " + markFail + " failed (Fn: its message is under Failures), " +
		markSkip + " skipped (Sn: the reason is below the table); blank: not in that run's selection.\n\n")
	b.WriteString("| test |")
	for _, r := range runs {
		fmt.Fprintf(b, " %s<br>%s |", nodesLabel(r.Nodes), runLabel(r))
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat(":-:|", len(runs)))
	b.WriteString("\n")
	group := "-"
	for _, name := range specNames(runs) {
		if g := suite.GroupOf(name); g != group {
			group = g
			title := g
			if g == "" {
				title = "other"
			}
			fmt.Fprintf(b, "| **%s** |%s\n", cell(title), strings.Repeat(" |", len(runs)))
		}
		fmt.Fprintf(b, "| %s |", cell(strings.TrimPrefix(name, group+" ")))
		for i, r := range runs {
			s, ok := idx[i][name]
			switch {
			case !ok:
				b.WriteString(" |")
			case s.State == suite.StatePassed:
				fmt.Fprintf(b, " %s %s |", markPass, duration(s.Duration))
			case s.Failed():
				fmt.Fprintf(b, " %s %s |", markFail, n.failure(r, s))
			default:
				fmt.Fprintf(b, " %s %s |", markSkip, n.skip(skipReason(s)))
			}
		}
		b.WriteString("\n")
	}
	if len(n.skips) > 0 {
		b.WriteString("\nSkipped because:\n\n")
		for i, reason := range n.skips {
			fmt.Fprintf(b, "- **S%d**: %s\n", i+1, cell(reason))
		}
	}
	b.WriteString("\n")
	return n
}

func skipReason(s suite.Spec) string {
	if s.SkipReason != "" {
		return s.SkipReason
	}
	return s.State
}

func writeFailures(b *strings.Builder, n *notes) {
	b.WriteString("## Failures\n\n")
	if len(n.failures) == 0 {
		b.WriteString("None.\n\n")
		return
	}
	for i, f := range n.failures {
		fmt.Fprintf(b, "**F%d** %s, %s (`%s`), %s after %s: %s\n\n", i+1,
			nodesLabel(f.run.Nodes), runLabel(f.run), f.run.Commit, f.s.State, duration(f.s.Duration), cell(f.spec))
		b.WriteString("```text\n")
		if msg := strings.TrimSpace(f.s.Failure); msg != "" {
			b.WriteString(strings.ReplaceAll(msg, "```", "'''") + "\n")
		}
		if f.s.Location != "" {
			b.WriteString(f.s.Location + "\n")
		}
		b.WriteString("```\n\n")
	}
}

// verdict is a spec's outcome in one run, as the comparisons see it.
func verdict(idx map[string]suite.Spec, name string) string {
	s, ok := idx[name]
	switch {
	case !ok:
		return ""
	case s.State == suite.StatePassed:
		return markPass
	case s.Failed():
		return markFail
	}
	return markSkip
}

// baseline returns the index of the kube-proxy run r is compared with:
// kube-proxy in r's mode on as many nodes, else in iptables mode; -1 when
// there is none.
func baseline(runs []Run, r Run) int {
	found := -1
	for i, k := range runs {
		if k.Program() != ProgramKubeProxy || k.Nodes != r.Nodes {
			continue
		}
		if k.Mode() == r.Mode() {
			return i
		}
		if k.Mode() == "iptables" {
			found = i
		}
	}
	return found
}

func writeExplained(b *strings.Builder, runs []Run) {
	idx := specIndex(runs)
	b.WriteString("## Explained differences\n\n")
	b.WriteString("Where a proxykit mode's documented semantics differ from iptables mode (`dataplane.LookupMode`), " +
		"or a spec chooses by the proxy's mode, its verdict is explained here; none is left out of the run.\n\n")
	b.WriteString("| test | mode | observed (proxykit / kube-proxy) | why |\n|---|---|---|---|\n")
	for _, e := range Explanations() {
		var seen []string
		for i, r := range runs {
			if r.Program() != ProgramProxykit || r.Mode() != e.Mode {
				continue
			}
			v := verdict(idx[i], e.Spec)
			if v == "" {
				continue
			}
			kp := "no run"
			if k := baseline(runs, r); k >= 0 {
				kp = verdict(idx[k], e.Spec)
			}
			seen = append(seen, fmt.Sprintf("%s: %s / %s", nodesLabel(r.Nodes), v, kp))
		}
		observed := "not run"
		if len(seen) > 0 {
			observed = strings.Join(seen, "; ")
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", cell(e.Spec), e.Mode, observed, cell(e.Why))
	}
	b.WriteString("\n")
}

func writeUnexplained(b *strings.Builder, runs []Run) {
	idx := specIndex(runs)
	b.WriteString("## Differences from kube-proxy nothing above explains\n\n")
	b.WriteString("Each proxykit run is compared with kube-proxy's on as many nodes, in the same mode where kube-proxy ran it, else in iptables mode.\n\n")
	var rows []string
	for i, r := range runs {
		if r.Program() != ProgramProxykit {
			continue
		}
		k := baseline(runs, r)
		if k < 0 {
			rows = append(rows, fmt.Sprintf("| (every test) | %s, %s | | no kube-proxy run on %s |", nodesLabel(r.Nodes), runLabel(r), nodesLabel(r.Nodes)))
			continue
		}
		for _, s := range r.Result.Specs {
			ours, theirs := verdict(idx[i], s.Name), verdict(idx[k], s.Name)
			if theirs == "" || ours == theirs {
				continue
			}
			if _, ok := explanationFor(s.Name, r.Mode()); ok {
				continue
			}
			rows = append(rows, fmt.Sprintf("| %s | %s, %s | %s | %s (%s) |",
				cell(s.Name), nodesLabel(r.Nodes), runLabel(r), ours, theirs, runs[k].Proxy))
		}
	}
	if len(rows) == 0 {
		b.WriteString("None.\n\n")
		return
	}
	b.WriteString("| test | run | proxykit | kube-proxy |\n|---|---|:-:|:-:|\n")
	b.WriteString(strings.Join(rows, "\n"))
	b.WriteString("\n\n")
}

func writeUnrunnable(b *strings.Builder, runs []Run) {
	b.WriteString("## Tests that cannot run here\n\n")
	b.WriteString("Left out of every run by name (`suite.Unrunnables`, read from the tests' source):\n\n")
	b.WriteString("| test | left out | why |\n|---|---|---|\n")
	for _, u := range suite.Unrunnables() {
		when := "always"
		if u.NeedsSCTP {
			when = "where the kernel has no SCTP"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", cell(u.Name), when, cell(u.Reason))
	}
	b.WriteString("\nIPv6, dual-stack and cloud load-balancer tests are in none of the selected groups " +
		"(the fixture is single-stack IPv4 without a load-balancer provider).\n\n")

	if len(runs) == 0 {
		return
	}
	b.WriteString("### Tests that need more than one node\n\n")
	b.WriteString("On a smaller cluster these skip themselves (`suite.NodesNeeded`); the 2- and 3-node runs host them.\n\n")
	b.WriteString("| test | nodes | why |\n|---|:-:|---|\n")
	for _, name := range specNames(runs) {
		if need, why := suite.NodesNeeded(name); need > 1 {
			fmt.Fprintf(b, "| %s | %d | %s |\n", cell(name), need, cell(why))
		}
	}
	b.WriteString("\n")
}
