package xtables

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// RestoreError is a rejected iptables-restore input. The kernel state is
// unchanged by the rejected table commit; the dataplane's next Sync is a
// full one.
type RestoreError struct {
	// Line is the 1-based line of the input that failed; 0 when the
	// output did not say.
	Line int
	// Context is the input around Line, each entry prefixed with its
	// line number, the failing one marked with "> ".
	Context []string
	// Output is what iptables-restore printed.
	Output string
	// Partial reports that the input was a partial sync.
	Partial bool
	// Timeout is set when iptables-restore did not finish within the
	// deadline its input's size allows (ExecConfig.RestoreTimeout) and
	// was killed; Err then wraps context.DeadlineExceeded.
	Timeout time.Duration
	// Err is the underlying exec error, if any.
	Err error
}

func (e *RestoreError) Error() string {
	var b strings.Builder
	b.WriteString("iptables-restore failed")
	if e.Timeout > 0 {
		fmt.Fprintf(&b, ": did not finish within %v, the deadline for its input; with the nft backend large rulesets restore very slowly (consider the nftables dataplane)", e.Timeout)
		return b.String()
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, " at line %d", e.Line)
	}
	if out := strings.TrimSpace(e.Output); out != "" {
		b.WriteString(": ")
		b.WriteString(firstLine(out))
	}
	if len(e.Context) > 0 {
		b.WriteString("\n")
		b.WriteString(strings.Join(e.Context, "\n"))
	}
	return b.String()
}

// Unwrap returns the exec error.
func (e *RestoreError) Unwrap() error { return e.Err }

// IsLockError reports whether the restore failed because the xtables lock
// or another resource was unavailable (exit status 4): worth a retry, not
// a sign of a bad ruleset.
func (e *RestoreError) IsLockError() bool {
	var ee *exec.ExitError
	return errors.As(e.Err, &ee) && ee.ExitCode() == 4
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// The two ways iptables-restore names the failing line.
var (
	lineFailedRE = regexp.MustCompile(`line (\d+) failed`)
	errorAtRE    = regexp.MustCompile(`Error occurred at line: (\d+)`)
)

// contextLines is how many lines either side of a failure are reported.
const contextLines = 3

func parseRestoreError(data, output []byte, err error) *RestoreError {
	e := &RestoreError{Output: string(output), Err: err}
	for _, re := range []*regexp.Regexp{lineFailedRE, errorAtRE} {
		if m := re.FindSubmatch(output); m != nil {
			e.Line, _ = strconv.Atoi(string(m[1]))
			break
		}
	}
	if e.Line > 0 {
		e.Context = extractLines(data, e.Line, contextLines)
	}
	return e
}

// extractLines returns the lines of data within n of line (1-based).
func extractLines(data []byte, line, n int) []string {
	var out []string
	for i, l := range bytes.Split(data, []byte("\n")) {
		num := i + 1
		if num < line-n {
			continue
		}
		if num > line+n {
			break
		}
		mark := "  "
		if num == line {
			mark = "> "
		}
		out = append(out, fmt.Sprintf("%s%d: %s", mark, num, l))
	}
	return out
}
