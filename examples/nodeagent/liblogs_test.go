package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	stdlog "log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	v1 "k8s.io/api/core/v1"
)

// mobyLogsEnv makes TestIPVSLibraryLogsFollowLoggingFormat's process the
// agent whose IPVS is opened by moby/ipvs itself.
const mobyLogsEnv = "NODEAGENT_TEST_MOBY_LOGS"

// TestIPVSLibraryLogsFollowLoggingFormat: what moby/ipvs logs (through
// logrus) reaches stderr through the agent's logger, in JSON with
// --logging-format json. The agent runs in a process of its own (moby/ipvs
// logs its set-up once per process), on fake iptables, and its IPVS is
// opened by moby/ipvs.New, which runs "modprobe ip_vs": a stand-in that
// fails makes it log, on any kernel, and loads nothing. The opened handle
// is closed and the agent stopped there, so nothing is programmed.
func TestIPVSLibraryLogsFollowLoggingFormat(t *testing.T) {
	if os.Getenv(mobyLogsEnv) == "1" {
		h := fakeHost(bothFamilies())
		h.ipvs = func(v1.IPFamily) (ipvs.Kernel, error) {
			k, err := mobyipvs.New("")
			if err == nil {
				k.Close()
			}
			return nil, errors.New("stopped by the test once moby/ipvs opened IPVS")
		}
		os.Exit(runOn(context.Background(), h, []string{"--logging-format=json", "--proxy-mode", "ipvs", "--demo", "--once", noConntrackMax}, os.Stdout, os.Stderr))
	}
	bin := t.TempDir()
	stub := "#!/bin/sh\necho 'modprobe: FATAL: Module ip_vs not found (the test stand-in)' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "modprobe"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestIPVSLibraryLogsFollowLoggingFormat$")
	cmd.Env = append(os.Environ(), mobyLogsEnv+"=1", "KUBERNETES_SERVICE_HOST=", "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatalf("the agent went past opening IPVS; stderr:\n%s", stderr.String())
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if strings.HasPrefix(line, "nodeagent: ") {
			continue // the exit's reason, not a log line
		}
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Errorf("not JSON: %q", line)
			continue
		}
		if msg, _ := entry["msg"].(string); strings.HasPrefix(msg, "Running modprobe ip_vs failed with message: `modprobe: FATAL: Module ip_vs not found (the test stand-in)`") {
			found = true
			if entry["logger"] != "logrus" {
				t.Errorf("moby/ipvs's line is not named after logrus: %q", line)
			}
		}
	}
	if !found {
		t.Errorf("no JSON line of moby/ipvs's failed modprobe; stderr:\n%s", stderr.String())
	}
}

// TestStandardLibraryLogsFollowLoggingFormat: a line of the standard log
// package (net/http's servers write their errors there) comes out as the
// agent's JSON while the agent runs, and the package is as it was after.
func TestStandardLibraryLogsFollowLoggingFormat(t *testing.T) {
	o, err := parse([]string{"--logging-format=json"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	prev := stdlog.Writer()
	undo := routeLibraryLogs(o.logger(&buf))
	stdlog.Print("http: TLS handshake error from 192.0.2.1:5555: EOF")
	undo()
	var entry map[string]any
	if err := json.Unmarshal(buf.Bytes(), &entry); err != nil {
		t.Fatalf("not JSON: %q", buf.String())
	}
	if diff := cmp.Diff("http: TLS handshake error from 192.0.2.1:5555: EOF", entry["msg"]); diff != "" {
		t.Errorf("msg (-want +got):\n%s", diff)
	}
	if stdlog.Writer() != prev {
		t.Errorf("the log package's output is not restored")
	}
}
