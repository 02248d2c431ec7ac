package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRun runs the pinned indexdb and govulncheck for real: a database
// built from testdata/osv (a made-up vulnerability in strings.Repeat, no
// fix), testdata/calls calling strings.Repeat, testdata/imports importing
// strings but not calling it.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a database and runs govulncheck twice")
	}
	var log bytes.Buffer
	db := filepath.Join(t.TempDir(), "db")
	if err := goToolIndexdb(".", &log)(t.Context(), "testdata/osv", db); err != nil {
		t.Fatalf("%v\n%s", err, &log)
	}
	// The Go that runs govulncheck's go list is the one that built this
	// test (the same go command, the same GOTOOLCHAIN).
	goVersion := runtime.Version()
	importsOK := "ok   imports (" + goVersion + "): 0 reachable; not called: 1 (GO-9999-0001) in imported packages, 0 in required modules\n"
	for _, tc := range []struct {
		name, accepted string
		wantStatus     int
		wantOut        string
	}{{
		name:       "a reachable vulnerability fails the check",
		wantStatus: 1,
		wantOut: "FAIL calls (" + goVersion + "): 1 reachable; not called: 0 in imported packages, 0 in required modules\n" +
			"  GO-9999-0001: A made-up vulnerability in strings.Repeat, with no fix\n" +
			"    found in stdlib@v" + goVersion[2:] + "; no fixed version\n" +
			"    main.go:6:37: calls.main → strings.Repeat\n" +
			importsOK,
	}, {
		name:       "accepted, it passes and is named",
		accepted:   "calls GO-9999-0001 the fixture's strings.Repeat is never fed a count from outside\n",
		wantStatus: 0,
		wantOut: "ok   calls (" + goVersion + "): 1 reachable, accepted: GO-9999-0001; not called: 0 in imported packages, 0 in required modules\n" +
			importsOK,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			acc := filepath.Join(t.TempDir(), "accepted.txt")
			if err := os.WriteFile(acc, []byte(tc.accepted), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			status := run(t.Context(), []string{"-C", "testdata", "-db", db, "-accepted", acc, "calls", "imports"}, &stdout, &stderr)
			if status != tc.wantStatus {
				t.Errorf("exit status %d, want %d; stderr:\n%s", status, tc.wantStatus, &stderr)
			}
			if diff := cmp.Diff(tc.wantOut, stdout.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunRefusesUsage(t *testing.T) {
	acc := filepath.Join(t.TempDir(), "accepted.txt")
	if err := os.WriteFile(acc, []byte("bench GO-2025-3547 why\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		args       []string
		wantStderr string
	}{{
		name:       "an acceptance for a module not checked",
		args:       []string{"-db", t.TempDir(), "-accepted", acc, "."},
		wantStderr: "vulncheck: " + acc + " accepts GO-2025-3547 for bench, which is not checked\n",
	}, {
		name:       "no module",
		args:       []string{"-accepted", acc},
		wantStderr: "usage: vulncheck",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if status := run(t.Context(), tc.args, &stdout, &stderr); status != 2 {
				t.Errorf("exit status %d, want 2", status)
			}
			if got := stderr.String(); !strings.HasPrefix(got, tc.wantStderr) {
				t.Errorf("stderr %q, want it to start with %q", got, tc.wantStderr)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout %q, want nothing", &stdout)
			}
		})
	}
}
