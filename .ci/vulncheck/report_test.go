package main

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// repeatCall is the call trace of testdata/calls.json, which govulncheck
// v1.9.0 wrote for testdata/calls against testdata/osv.
var repeatCall = &finding{OSV: "GO-9999-0001", Trace: []*frame{
	{Module: "stdlib", Version: "v1.27.3", Package: "strings", Function: "Repeat", Position: &position{Filename: "src/strings/strings.go", Line: 597, Column: 6}},
	{Module: "example.com/calls", Package: "example.com/calls", Function: "main", Position: &position{Filename: "main.go", Line: 6, Column: 37}},
}}

const repeatSummary = "A made-up vulnerability in strings.Repeat, with no fix"

func TestReadScan(t *testing.T) {
	recorded, err := os.ReadFile("testdata/calls.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, stream string
		want         *scan
	}{{
		name:   "govulncheck's own stream: the deepest level counts",
		stream: string(recorded),
		want: &scan{
			GoVersion: "go1.27.3",
			Called:    map[string][]*finding{"GO-9999-0001": {repeatCall}},
			Summary:   map[string]string{"GO-9999-0001": repeatSummary},
		},
	}, {
		name: "imported only, required only",
		stream: `{"config": {"go_version": "go1.27.3"}}
{"finding": {"osv": "GO-1", "trace": [{"module": "m"}]}}
{"finding": {"osv": "GO-1", "trace": [{"module": "m", "package": "m/p"}]}}
{"finding": {"osv": "GO-2", "trace": [{"module": "n"}]}}`,
		want: &scan{
			GoVersion: "go1.27.3", Called: map[string][]*finding{}, Summary: map[string]string{},
			Imported: []string{"GO-1"}, Required: []string{"GO-2"},
		},
	}, {
		name:   "nothing found",
		stream: `{"config": {"go_version": "go1.27.3"}}`,
		want:   &scan{GoVersion: "go1.27.3", Called: map[string][]*finding{}, Summary: map[string]string{}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readScan(strings.NewReader(tc.stream))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("readScan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadScanRefusesBrokenStreams(t *testing.T) {
	for _, stream := range []string{
		`{"finding": {"osv": "GO-1"}}`,
		`{"config": {`,
	} {
		if s, err := readScan(strings.NewReader(stream)); err == nil {
			t.Errorf("readScan(%q) = %+v, want an error", stream, s)
		}
	}
}

func TestJudge(t *testing.T) {
	fixed := &finding{OSV: "GO-9999-0002", FixedVersion: "v1.27.4", Trace: repeatCall.Trace}
	s := &scan{
		GoVersion: "go1.27.3",
		Called:    map[string][]*finding{"GO-9999-0001": {repeatCall}, "GO-9999-0002": {fixed}},
		Summary:   map[string]string{"GO-9999-0001": repeatSummary, "GO-9999-0002": "fixed"},
	}
	const (
		unfixedFailure = "GO-9999-0001: " + repeatSummary + "\n" +
			"    found in stdlib@v1.27.3; no fixed version\n" +
			"    main.go:6:37: calls.main → strings.Repeat"
		fixedFailure = "GO-9999-0002: fixed\n" +
			"    found in stdlib@v1.27.3; fixed in stdlib@v1.27.4\n" +
			"    main.go:6:37: calls.main → strings.Repeat"
	)
	for _, tc := range []struct {
		name string
		acc  accepted
		want verdict
	}{{
		name: "nothing accepted: each reachable vulnerability fails, with its trace",
		want: verdict{Module: "calls", Failures: []string{unfixedFailure, fixedFailure}},
	}, {
		name: "an unfixed vulnerability accepted",
		acc:  accepted{{"calls", "GO-9999-0001"}: "why"},
		want: verdict{Module: "calls", Failures: []string{fixedFailure}, Accepted: []string{"GO-9999-0001"}},
	}, {
		name: "a fixed one is never accepted",
		acc:  accepted{{"calls", "GO-9999-0001"}: "why", {"calls", "GO-9999-0002"}: "why not"},
		want: verdict{Module: "calls", Accepted: []string{"GO-9999-0001"}, Failures: []string{
			"GO-9999-0002 is accepted (why not), but is now fixed in stdlib@v1.27.4: move to it and remove the acceptance",
		}},
	}, {
		name: "an acceptance no longer found fails; another module's is not this one's",
		acc: accepted{
			{"calls", "GO-9999-0001"}: "why", {"calls", "GO-9999-0003"}: "gone",
			{"other", "GO-9999-0002"}: "elsewhere",
		},
		want: verdict{Module: "calls", Accepted: []string{"GO-9999-0001"}, Failures: []string{
			fixedFailure,
			"GO-9999-0003 is accepted for calls, but no longer found there: remove the acceptance",
		}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, judge("calls", s, tc.acc)); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadAccepted(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       accepted
		wantErr    string
	}{{
		name: "comments, blank lines, folders cleaned",
		file: "# header\n\nbench  GO-2025-3547  the entry names   the whole module # and a comment\n./examples/x/ GO-2026-0001 why\n",
		want: accepted{
			{"bench", "GO-2025-3547"}:      "the entry names the whole module",
			{"examples/x", "GO-2026-0001"}: "why",
		},
	}, {
		name:    "no reason",
		file:    "# header\nbench GO-2025-3547\n",
		wantErr: `accepted.txt:2: want a module's folder, a vulnerability ID and the reason it cannot harm, got "bench GO-2025-3547"`,
	}, {
		name:    "not an ID",
		file:    "bench CVE-2024-7598 why\n",
		wantErr: `accepted.txt:1: "CVE-2024-7598" is not a Go vulnerability ID (GO-YYYY-NNNN)`,
	}, {
		name:    "twice",
		file:    "bench GO-2025-3547 why\nbench/ GO-2025-3547 why again\n",
		wantErr: "accepted.txt:2: GO-2025-3547 is accepted for bench twice",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAccepted(strings.NewReader(tc.file), "accepted.txt")
			if gotErr := errString(err); gotErr != tc.wantErr {
				t.Fatalf("error %q, want %q", gotErr, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("readAccepted (-want +got):\n%s", diff)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestAcceptedFile checks the repository's own list.
func TestAcceptedFile(t *testing.T) {
	if _, err := loadAccepted("accepted.txt"); err != nil {
		t.Fatal(err)
	}
}
