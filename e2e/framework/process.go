package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child process of the cluster. Processes re-opened by Load have no
// cmd; they are tracked by PID and start time only.
type process struct {
	Name      string   `json:"name"`
	PID       int      `json:"pid"`
	StartTime uint64   `json:"startTime"` // field 22 of /proc/PID/stat, guards against PID reuse
	Log       string   `json:"log"`
	Args      []string `json:"args"`

	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait returned
	err  error         // cmd.Wait's result, valid after done
}

// startProcess starts bin with args, stdout and stderr appended to logs/<name>.log.
func startProcess(dir, name, bin string, args, env []string, detach bool) (*process, error) {
	logPath := filepath.Join(dir, "logs", name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own copy
	fmt.Fprintf(logf, "==== %s: %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))

	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = append(os.Environ(), env...)
	if detach {
		// Own session: survives the exit of this process and a Ctrl-C in its terminal.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		// Dies with the test binary even when Stop is never reached.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{Name: name, PID: cmd.Process.Pid, Log: logPath, Args: append([]string{bin}, args...), cmd: cmd, done: make(chan struct{})}
	p.StartTime, _ = procStartTime(p.PID)
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// ProcStat returns the fields of /proc/<pid>/stat after the command name: f[0] is
// field 3 (state) of proc(5), f[i] is field i+3. Errors: the file cannot be read, or it
// has no command name or fewer than 20 fields after it (field 22, starttime, is f[19]).
func ProcStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	// The command name (field 2) may contain spaces; fields after it are plain.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	return f, nil
}

// procStartTime reads the start time (clock ticks since boot) of pid from /proc.
func procStartTime(pid int) (uint64, error) {
	f, err := ProcStat(pid)
	if err != nil {
		return 0, err
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, errors.New("zombie")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// alive reports whether the process still runs (a zombie counts as gone).
func (p *process) alive() bool {
	if p.cmd != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	st, err := procStartTime(p.PID)
	if err != nil {
		return false
	}
	return p.StartTime == 0 || st == p.StartTime
}

// exited returns a non-nil error describing the exit if the process has ended.
func (p *process) exited() error {
	if p.alive() {
		return nil
	}
	if p.cmd != nil && p.err != nil {
		return fmt.Errorf("%s (pid %d) exited: %v", p.Name, p.PID, p.err)
	}
	return fmt.Errorf("%s (pid %d) exited", p.Name, p.PID)
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs and waits again.
func (p *process) stop(grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	if p.waitGone(grace) {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	if p.waitGone(10 * time.Second) {
		return nil
	}
	return fmt.Errorf("%s (pid %d) still running after SIGKILL", p.Name, p.PID)
}

func (p *process) waitGone(d time.Duration) bool {
	if p.cmd != nil {
		select {
		case <-p.done:
			return true
		case <-time.After(d):
			return false
		}
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !p.alive() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return !p.alive()
}

// logTail returns the last n lines of the process log.
func (p *process) logTail(n int) string {
	return tailFile(p.Log, n)
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	if len(b) > 64<<10 {
		b = b[len(b)-64<<10:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// componentError wraps err with the component name, its log path and the log's tail.
func componentError(p *process, err error) error {
	return fmt.Errorf("%s: %w\nlog %s, last lines:\n%s", p.Name, err, p.Log, p.logTail(25))
}

// waitReady polls check every 200ms until it returns nil, the process exits, ctx ends
// or timeout passes. Errors name the component and include its log tail.
func waitReady(ctx context.Context, p *process, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if err := p.exited(); err != nil {
			return componentError(p, err)
		}
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return componentError(p, fmt.Errorf("not ready after %v: %v", timeout, last))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{} // ports freePorts returned in this process
)

// freePorts returns n distinct free TCP ports on 127.0.0.1, never one it returned before
// in this process. It picks them from the 12,000 ports below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range): a port the kernel gives for port 0 is an
// ephemeral one, which an outgoing connection of any process (the API server's to etcd,
// a client's, Prometheus' scrapes) may take as its local port between this call and the
// bind of the process it is for, or while that process is down (Prometheus between
// StopPrometheus and StartPrometheus), and the bind then fails with "address already in
// use". Without a readable range (not Linux) the kernel picks them (port 0). Errors come
// from listening.
func freePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	ports := make([]int, 0, n)
	low := ephemeralLow()
	for range n {
		p := 0
		if low > 12000+1024 {
			for range 1000 {
				c := low - 1 - rand.IntN(12000)
				if handedOut[c] {
					continue
				}
				l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c))
				if err != nil {
					continue
				}
				l.Close()
				p = c
				break
			}
		}
		if p == 0 {
			for {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					return nil, fmt.Errorf("find free port: %w", err)
				}
				p = l.Addr().(*net.TCPAddr).Port
				l.Close()
				if !handedOut[p] {
					break
				}
			}
		}
		handedOut[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0 when unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return low
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1 for processes started next
// (e.g. with StartProcess), below the ephemeral range and never one it or the cluster
// got before in this process (freePorts). Errors come from listening.
func FreePorts(n int) ([]int, error) { return freePorts(n) }

// StartProcess starts bin with args as one more process of the cluster (a webhook under
// test, say), its output in LogPath(name), and records it so that Stop stops it first.
// It returns the PID; it does not wait for readiness.
func (c *Cluster) StartProcess(name, bin string, args ...string) (int, error) {
	return c.StartProcessEnv(name, bin, nil, args...)
}

// StartProcessEnv is StartProcess with env (KEY=VALUE) added to the process's
// environment, which is otherwise this process's.
func (c *Cluster) StartProcessEnv(name, bin string, env []string, args ...string) (int, error) {
	p, err := c.start(name, bin, env, args...)
	if err != nil {
		return 0, err
	}
	return p.PID, nil
}

// ProcessError returns nil while the named process (the last one started with that name)
// runs, else an error with the tail of its log.
func (c *Cluster) ProcessError(name string) error {
	p := c.findProcess(name)
	if p == nil {
		return fmt.Errorf("no process %s", name)
	}
	if err := p.exited(); err != nil {
		return componentError(p, err)
	}
	return nil
}
