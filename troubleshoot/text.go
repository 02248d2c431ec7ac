package troubleshoot

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText prints r for people, in one screen for a service of a few
// ports: the service, each port with its frontends (and what the kernel
// does there), policies, endpoints and the endpoints serving each kind of
// traffic, then the findings and the verdict.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	node := r.Node
	if r.Zone != "" {
		node += " (zone " + r.Zone + ")"
	}
	fmt.Fprintf(tw, "service\t%s\n", r.Service)
	fmt.Fprintf(tw, "node\t%s\n", node)
	for _, p := range r.Ports {
		fmt.Fprintf(tw, "\nport %s/%s (%s)\n", portLabel(p.Name), p.Protocol, p.Family)
		for i, f := range p.Frontends {
			head := "  frontends"
			if i > 0 {
				head = ""
			}
			line := fmt.Sprintf("%s\t%s\t%s", head, f.Address, f.Type)
			if f.Kernel != "" {
				line += "\t" + f.Kernel
			}
			fmt.Fprintln(tw, line)
		}
		policy := "internal " + p.InternalPolicy
		if p.ExternalPolicy != "" {
			policy += ", external " + p.ExternalPolicy
		}
		fmt.Fprintf(tw, "  policy\t%s\n", policy)
		if len(p.SourceRanges) > 0 {
			fmt.Fprintf(tw, "  source ranges\t%s\n", strings.Join(p.SourceRanges, ", "))
		}
		if len(p.Endpoints) == 0 {
			fmt.Fprintf(tw, "  endpoints\tnone\n")
		}
		for i, e := range p.Endpoints {
			head := "  endpoints"
			if i > 0 {
				head = ""
			}
			where := e.Node
			if where == "" {
				where = "node unknown"
			}
			if e.Local {
				where += " (this node)"
			}
			if e.Zone != "" {
				where += ", zone " + e.Zone
			}
			var hints []string
			if len(e.ZoneHints) > 0 {
				hints = append(hints, "zones "+strings.Join(e.ZoneHints, ","))
			}
			if len(e.NodeHints) > 0 {
				hints = append(hints, "nodes "+strings.Join(e.NodeHints, ","))
			}
			line := fmt.Sprintf("%s\t%s\t%s\t%s", head, e.Address, e.State, where)
			if len(hints) > 0 {
				line += "\thints: " + strings.Join(hints, "; ")
			}
			fmt.Fprintln(tw, line)
		}
		if p.Cluster != nil {
			fmt.Fprintf(tw, "  cluster traffic\t%s\n", listOrNone(p.Cluster))
		}
		if p.InternalPolicy == "Local" || p.ExternalPolicy == "Local" {
			fmt.Fprintf(tw, "  local traffic\t%s\n", listOrNone(p.Local))
		}
		for _, n := range p.Notes {
			fmt.Fprintf(tw, "  note\t%s\n", n)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	verdictShown := false
	for _, f := range r.Findings {
		if !r.OK && !verdictShown && f.Severity == Problem {
			// The verdict line repeats the first problem.
			verdictShown = true
			continue
		}
		where := ""
		if f.Port != "" {
			where = f.Port + ": "
		}
		fmt.Fprintf(w, "%s: %s%s\n", f.Severity, where, f.Text)
	}
	_, err := fmt.Fprintf(w, "verdict: %s\n", r.Verdict)
	return err
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}
