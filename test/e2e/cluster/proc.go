package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupEnv carries the cgroup.procs files to the wrapper that joins them.
const cgroupEnv = "PROXYKIT_E2E_CGROUP_PROCS"

// joinAndExec is a shell program that moves itself into every cgroup
// named by cgroupEnv and then becomes its arguments: the process is in the
// fixture's tree before it can start anything, and keeps its PID.
const joinAndExec = `for f in $` + cgroupEnv + `; do echo $$ > "$f" || exit 125; done; unset ` + cgroupEnv + `; exec "$@"`

// processPath is the PATH of every process the fixture starts: containerd
// finds its shims and runc there, kubelet and the proxies their tools.
const processPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// command returns a command that runs name with args inside the cgroup
// leaf rel of every hierarchy.
func (c cgroups) command(ctx context.Context, rel string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", joinAndExec, "sh", name}, args...)...)
	env := []string{"PATH=" + processPath, cgroupEnv + "=" + strings.Join(c.procsFiles(rel), " ")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, cgroupEnv+"=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	return cmd
}

// nsenterArgs prefixes argv with what runs it in holder's network and
// mount namespaces. nsenter execs the program (it forks only to enter a
// PID namespace), so the PID stays the program's.
func nsenterArgs(holder int, argv ...string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(holder), "-n", "-m", "--"}, argv...)
}

// process is one long-running program of the fixture, logging to a file.
type process struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // of Wait, once done is closed
}

// startProcess starts argv in cgroup leaf rel, appending its output to
// logPath. The process is not tied to ctx: it runs until stopped.
func (c cgroups) startProcess(rel, name, logPath string, argv ...string) (*process, error) {
	if err := c.makeDir(rel); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("cluster: log of %s: %w", name, err)
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: log of %s: %w", name, err)
	}
	fmt.Fprintf(f, "=== %s %s: %s\n", time.Now().UTC().Format(time.RFC3339), name, strings.Join(argv, " "))
	cmd := c.command(context.Background(), rel, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("cluster: start %s: %w", name, err)
	}
	p := &process{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILL, and waits for the
// process to be reaped.
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// failure is an error about p carrying its log's tail.
func (p *process) failure(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if p.exited() {
		msg += fmt.Sprintf(" (exited: %v)", p.err)
	}
	return fmt.Errorf("cluster: %s: %s; %s ends:\n%s", p.name, msg, p.log, tail(p.log, 25))
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n"))) + "\n"
}

// run runs argv to completion in cgroup leaf rel and returns its combined
// output; the error names the command and carries the output.
func (c cgroups) run(ctx context.Context, rel string, argv ...string) (string, error) {
	if err := c.makeDir(rel); err != nil {
		return "", err
	}
	cmd := c.command(ctx, rel, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("cluster: %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}
