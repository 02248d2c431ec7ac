package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// childEnv makes TestReclaimAfterKill's child bring a cluster up and wait
// to be killed.
const childEnv = "PROXYKIT_E2E_RECLAIM_CHILD"

// TestReclaimAfterKill kills (SIGKILL) a process that brought a cluster
// up, as a user's ^\ or the OOM killer would, and checks that Reclaim
// removes everything it left, while a cluster of this process, up
// meanwhile, survives.
func TestReclaimAfterKill(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		reclaimChild(t)
		return
	}
	bin, images := testBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	workDir := t.TempDir()
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestReclaimAfterKill$", "-test.v")
	child.Env = append(os.Environ(), childEnv+"="+workDir)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var left footprint
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "UP "); ok {
			left = parseFootprint(t, line, workDir)
			break
		}
	}
	if left.holders == nil {
		_ = child.Wait()
		t.Fatalf("the child brought no cluster up: %v", sc.Err())
	}
	// A cluster of this process, which Reclaim must leave alone.
	alive, err := Up(ctx, Config{Bin: bin, Images: images, WorkDir: filepath.Join(t.TempDir(), "alive"), Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := alive.Down(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	since := time.Now()
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	if err := Reclaim(ctx, testLog{t}); err != nil {
		t.Fatal(err)
	}
	left.check(t, since)
	if _, err := alive.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the live cluster after Reclaim: %v", err)
	}
}

// reclaimChild brings a cluster up, prints its footprint and waits.
func reclaimChild(t *testing.T) {
	bin, images := testBinaries(t)
	ctx := context.Background()
	c, err := Up(ctx, Config{Bin: bin, Images: images, WorkDir: os.Getenv(childEnv), Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	f := c.footprint(t)
	var ns []string
	for k := range f.namespaces {
		ns = append(ns, k)
	}
	fmt.Printf("UP %s %s %s\n", strings.Join(f.cgroups, ","), strings.Trim(fmt.Sprint(f.holders), "[]"), strings.Join(ns, " "))
	time.Sleep(5 * time.Minute) // killed long before
	_ = c.Down(ctx)
}

// parseFootprint reads the child's "UP" line.
func parseFootprint(t *testing.T, line, workDir string) footprint {
	t.Helper()
	f := footprint{namespaces: map[string]bool{}, workDir: workDir}
	fields := strings.Fields(line)
	f.cgroups = strings.Split(fields[0], ",")
	for _, s := range fields[1:] {
		if pid, err := strconv.Atoi(s); err == nil {
			f.holders = append(f.holders, pid)
		} else {
			f.namespaces[s] = true
		}
	}
	return f
}
