package suite

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/onsi/ginkgo/v2/types"
)

// Result is what one run of the selection found, condensed: no output of
// the specs, only their verdicts.
type Result struct {
	Specs    []Spec        // the selected specs (those skipped here included), by name
	Duration time.Duration // the suite's wall time
	// Focus is the preset that was run.
	Focus Focus `json:",omitempty"`
	// Seed is ginkgo's random seed: --seed with it runs the specs in the
	// same order again.
	Seed int64 `json:",omitempty"`
	// SuiteFailures are failures outside any spec (a BeforeSuite, an
	// interrupt, a timeout), each a condensed message.
	SuiteFailures []string `json:",omitempty"`
}

// Spec states, as ginkgo names them.
const (
	StatePassed  = "passed"
	StateFailed  = "failed"
	StateSkipped = "skipped"
)

// Spec is one selected spec's verdict.
type Spec struct {
	Name     string        // full name, as ginkgo's --focus sees it after the suite description
	State    string        // passed, failed, skipped, panicked, timedout, interrupted, aborted, pending
	Duration time.Duration `json:",omitempty"`
	// Failure is the first lines of the failure message; Location where it
	// failed ("test/e2e/network/service.go:4168", "in [AfterEach] at ..."
	// when not in the spec's body).
	Failure  string `json:",omitempty"`
	Location string `json:",omitempty"`
	// SkipReason is why a skipped spec did not run: its own message (e.g.
	// "Requires at least 2 nodes (not 1)") or why this fixture cannot host
	// it (Unrunnables).
	SkipReason string `json:",omitempty"`
}

// Failed reports whether the spec ended in any failure state.
func (s Spec) Failed() bool {
	return s.State != StatePassed && s.State != StateSkipped && s.State != "pending"
}

// Count returns how many specs passed, failed and were skipped.
func (r Result) Count() (passed, failed, skipped int) {
	for _, s := range r.Specs {
		switch {
		case s.State == StatePassed:
			passed++
		case s.Failed():
			failed++
		default:
			skipped++
		}
	}
	return passed, failed, skipped
}

// Failure lines and characters kept of a message: enough to recognise the
// failure, never a dump of pod logs.
const (
	maxFailureLines = 6
	maxFailureChars = 800
)

// ReadReport reads the JSON report ginkgo wrote (--json-report) and keeps
// the specs focus selects; skipped names the specs Run left out on
// purpose, with the reason the Result gives for each.
func ReadReport(path string, focus Focus, skipped map[string]string) (Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Result{}, fmt.Errorf("reading ginkgo's report: %w", err)
	}
	var reports []types.Report
	if err := json.Unmarshal(b, &reports); err != nil {
		return Result{}, fmt.Errorf("reading ginkgo's report %s: %w", path, err)
	}
	if len(reports) != 1 {
		return Result{}, fmt.Errorf("ginkgo's report %s holds %d suites, want 1", path, len(reports))
	}
	return condense(reports[0], focus, skipped), nil
}

func condense(r types.Report, focus Focus, skipped map[string]string) Result {
	res := Result{Duration: r.RunTime.Round(time.Millisecond), Focus: focus, Seed: r.SuiteConfig.RandomSeed}
	for _, reason := range r.SpecialSuiteFailureReasons {
		res.SuiteFailures = append(res.SuiteFailures, reason)
	}
	for _, sr := range r.SpecReports {
		if sr.LeafNodeType != types.NodeTypeIt {
			if sr.State.Is(types.SpecStateFailureStates) {
				res.SuiteFailures = append(res.SuiteFailures,
					fmt.Sprintf("[%s] %s (%s)", sr.LeafNodeType, firstLines(sr.Failure.Message), fileLine(sr.Failure)))
			}
			continue
		}
		name := sr.FullText()
		if !focus.Selects(name) {
			continue
		}
		s := Spec{Name: name, State: sr.State.String(), Duration: sr.RunTime.Round(time.Millisecond)}
		switch {
		case sr.State == types.SpecStateSkipped && sr.NumAttempts == 0:
			// Never started: filtered out by --skip.
			s.SkipReason = skipped[name]
			if s.SkipReason == "" {
				s.SkipReason = "left out by --skip"
			}
		case sr.State == types.SpecStateSkipped:
			s.SkipReason = firstLines(sr.Failure.Message)
		case sr.State.Is(types.SpecStateFailureStates):
			s.Failure = firstLines(failureMessage(sr.Failure))
			s.Location = location(sr.Failure)
		}
		res.Specs = append(res.Specs, s)
	}
	slices.SortFunc(res.Specs, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
	return res
}

func failureMessage(f types.Failure) string {
	if f.ForwardedPanic != "" {
		return "panic: " + f.ForwardedPanic
	}
	return f.Message
}

// location names where a spec failed, and the node type when the failure
// is not in the spec's body.
func location(f types.Failure) string {
	loc := fileLine(f)
	if loc != "" && f.FailureNodeType != types.NodeTypeInvalid && f.FailureNodeType != types.NodeTypeIt {
		loc = fmt.Sprintf("in [%s] at %s", f.FailureNodeType, loc)
	}
	return loc
}

// fileLine is where f happened, relative to the kubernetes module.
func fileLine(f types.Failure) string {
	file := f.Location.FileName
	// Trimmed paths read "k8s.io/kubernetes@v1.37.2/test/...", untrimmed
	// ones hold the module cache directory before that.
	if _, rest, ok := strings.Cut(file, "k8s.io/kubernetes@"); ok {
		if _, path, ok := strings.Cut(rest, "/"); ok {
			file = path
		}
	}
	if file == "" {
		return ""
	}
	return fmt.Sprintf("%s:%d", file, f.Location.LineNumber)
}

// ansiColor matches the terminal colour codes ginkgo writes into some
// messages of its own, --no-color or not.
var ansiColor = regexp.MustCompile("\x1b\\[[0-9;]*m")

// firstLines keeps the head of a message: its first non-empty lines, each
// trimmed, within maxFailureChars, without colour codes.
func firstLines(msg string) string {
	msg = ansiColor.ReplaceAllString(msg, "")
	var kept []string
	for _, line := range strings.Split(msg, "\n") {
		line = strings.TrimRight(line, " \t\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if len(kept) == maxFailureLines {
			kept = append(kept, "…")
			break
		}
		kept = append(kept, line)
	}
	out := strings.Join(kept, "\n")
	if len(out) > maxFailureChars {
		cut := maxFailureChars
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut] + "…"
	}
	return out
}
