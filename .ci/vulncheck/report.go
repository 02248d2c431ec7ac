package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
)

// The parts of govulncheck's -format json stream (its protocol v1.0.0,
// documented in x/vuln's internal/govulncheck, which cannot be imported)
// that the verdict needs.
type message struct {
	Config  *scanConfig `json:"config"`
	OSV     *osvEntry   `json:"osv"`
	Finding *finding    `json:"finding"`
}

type scanConfig struct {
	GoVersion      string `json:"go_version"`
	ScannerVersion string `json:"scanner_version"`
}

type osvEntry struct {
	ID      string `json:"id"`
	Summary string `json:"summary"`
}

type finding struct {
	OSV          string   `json:"osv"`
	FixedVersion string   `json:"fixed_version"`
	Trace        []*frame `json:"trace"`
}

type frame struct {
	Module   string    `json:"module"`
	Version  string    `json:"version"`
	Package  string    `json:"package"`
	Function string    `json:"function"`
	Receiver string    `json:"receiver"`
	Position *position `json:"position"`
}

type position struct {
	Filename string `json:"filename"`
	Line     int    `json:"line"`
	Column   int    `json:"column"`
}

// scan is what govulncheck found in one module.
type scan struct {
	GoVersion string
	// Called holds, per vulnerability the module's code calls, the
	// findings with a call trace (govulncheck's exit status 3 in text
	// mode).
	Called map[string][]*finding
	// Imported and Required are the vulnerabilities only in packages the
	// code imports, and only in modules it requires, sorted.
	Imported, Required []string
	Summary            map[string]string
}

// readScan reads a govulncheck -format json stream. Govulncheck reports a
// vulnerability at each level it reaches (module, then package, then
// symbol); its deepest level is the one that counts.
func readScan(r io.Reader) (*scan, error) {
	s := &scan{Called: map[string][]*finding{}, Summary: map[string]string{}}
	level := map[string]int{}
	const (
		required = iota + 1
		imported
		called
	)
	dec := json.NewDecoder(r)
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading govulncheck's JSON: %w", err)
		}
		switch {
		case m.Config != nil:
			s.GoVersion = m.Config.GoVersion
		case m.OSV != nil:
			s.Summary[m.OSV.ID] = m.OSV.Summary
		case m.Finding != nil:
			f := m.Finding
			if len(f.Trace) == 0 {
				return nil, fmt.Errorf("govulncheck's finding of %s has no trace", f.OSV)
			}
			l := required
			switch {
			case f.Trace[0].Function != "":
				l = called
				s.Called[f.OSV] = append(s.Called[f.OSV], f)
			case f.Trace[0].Package != "":
				l = imported
			}
			level[f.OSV] = max(level[f.OSV], l)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(level)) {
		switch level[id] {
		case imported:
			s.Imported = append(s.Imported, id)
		case required:
			s.Required = append(s.Required, id)
		}
	}
	return s, nil
}

// verdict is one module's result under the accepted findings.
type verdict struct {
	Module string
	// Failures are the reasons the module fails, one a line.
	Failures []string
	// Accepted are the reachable vulnerabilities accepted for it.
	Accepted []string
}

// judge compares a module's scan with the findings accepted for it.
func judge(module string, s *scan, acc accepted) verdict {
	v := verdict{Module: module}
	for _, id := range slices.Sorted(maps.Keys(s.Called)) {
		fs := s.Called[id]
		reason, ok := acc[acceptKey{module, id}]
		fixed := fixedVersion(fs)
		switch {
		case !ok:
			v.Failures = append(v.Failures, describe(id, s.Summary[id], fs))
		case fixed != "":
			v.Failures = append(v.Failures, fmt.Sprintf("%s is accepted (%s), but is now fixed in %s: move to it and remove the acceptance", id, reason, fixed))
		default:
			v.Accepted = append(v.Accepted, id)
		}
	}
	for _, k := range acc.keys() {
		if k.Module == module && s.Called[k.ID] == nil {
			v.Failures = append(v.Failures, fmt.Sprintf("%s is accepted for %s, but no longer found there: remove the acceptance", k.ID, module))
		}
	}
	return v
}

// fixedVersion is the version of the vulnerable module that fixes a
// vulnerability, or "" when none does.
func fixedVersion(fs []*finding) string {
	for _, f := range fs {
		if f.FixedVersion != "" {
			return f.Trace[0].Module + "@" + f.FixedVersion
		}
	}
	return ""
}

// describe says what a reachable vulnerability is, where it is and how
// the module's code reaches it (the first trace, from the module's code
// to the vulnerable symbol).
func describe(id, summary string, fs []*finding) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", id, summary)
	var found []string
	for _, f := range fs {
		at := f.Trace[0].Module + "@" + f.Trace[0].Version
		if !slices.Contains(found, at) {
			found = append(found, at)
		}
	}
	fmt.Fprintf(&b, "\n    found in %s", strings.Join(found, ", "))
	if fixed := fixedVersion(fs); fixed != "" {
		fmt.Fprintf(&b, "; fixed in %s", fixed)
	} else {
		b.WriteString("; no fixed version")
	}
	t := fs[0].Trace
	var names []string
	for i := len(t) - 1; i >= 0; i-- {
		names = append(names, symbol(t[i]))
	}
	b.WriteString("\n    ")
	if p := t[len(t)-1].Position; p != nil && p.Line > 0 {
		fmt.Fprintf(&b, "%s:%d:%d: ", p.Filename, p.Line, p.Column)
	}
	b.WriteString(strings.Join(names, " → "))
	return b.String()
}

// symbol names a frame as govulncheck's text output does: the package's
// last element, the receiver's type and the function.
func symbol(f *frame) string {
	name := path.Base(f.Package)
	if f.Receiver != "" {
		name += "." + strings.TrimPrefix(f.Receiver, "*")
	}
	return name + "." + f.Function
}

// write prints a module's verdict and its counts.
func (v verdict) write(w io.Writer, s *scan) {
	status := "ok  "
	if len(v.Failures) > 0 {
		status = "FAIL"
	}
	fmt.Fprintf(w, "%s %s (%s): %d reachable", status, v.Module, s.GoVersion, len(s.Called))
	if len(v.Accepted) > 0 {
		fmt.Fprintf(w, ", accepted: %s", strings.Join(v.Accepted, ", "))
	}
	fmt.Fprintf(w, "; not called: %s in imported packages, %s in required modules\n", ids(s.Imported), ids(s.Required))
	for _, f := range v.Failures {
		fmt.Fprintf(w, "  %s\n", f)
	}
}

// ids counts vulnerabilities and names them.
func ids(l []string) string {
	if len(l) == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", len(l), strings.Join(l, ", "))
}
