package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// process is one child process inside a namespace, with its output in a
// log file, killed by its PID when the test ends.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startProcess starts bin in ns, logging to dir/name.log (appended, so a
// restarted process keeps its predecessor's log).
func startProcess(t testing.TB, ns *NS, dir, name, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== %s start %s\n", name, time.Now().Format(time.RFC3339Nano))
	cmd := ns.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", name, tail(logPath, 40))
		}
	})
	return p, nil
}

// kill sends SIGKILL to the process by PID and waits for it to be reaped.
func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop sends SIGTERM and waits for the process to end, killing it after
// timeout.
func (p *process) stop(timeout time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
	}
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var sb strings.Builder
	for _, l := range lines {
		sb.Write(l)
		sb.WriteByte('\n')
	}
	return sb.String()
}
