// Package rabbitmqtest starts a real RabbitMQ server for tests, benchmarks and
// CI: Debian's rabbitmq-server package, run as a child process on 127.0.0.1
// with random ports and every file in a temporary directory, so that it
// touches nothing of a system broker and several can run at once. It owns the
// broker's life (start, readiness, clean stop) and the rule for when a test
// may skip: only outside CI.
package rabbitmqtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// URLEnv names an environment variable holding the URL of a running broker
// (amqp://guest:guest@127.0.0.1:5672/) to use instead of starting one.
const URLEnv = "SESSIONWIRE_AMQP_URL"

// startTimeout bounds the wait for a new broker to accept AMQP connections;
// RabbitMQ 3.10 on two busy cores takes about 25 s.
const startTimeout = 2 * time.Minute

// Broker is a RabbitMQ server process started by [Start].
type Broker struct {
	// URL is the AMQP URL of the broker, as user guest.
	URL string

	addr   string // the AMQP listener
	dir    string
	cmd    *exec.Cmd
	epmd   *exec.Cmd
	exited chan struct{}
	err    error // the process's exit, once exited is closed
}

// server finds the rabbitmq-server script that runs the broker in the
// foreground as the calling user. Debian's /usr/sbin/rabbitmq-server is a
// wrapper that switches to the rabbitmq user and writes the output to
// /var/log, so the script it wraps comes first.
func server() (string, error) {
	const debian = "/usr/lib/rabbitmq/bin/rabbitmq-server"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	p, err := exec.LookPath("rabbitmq-server")
	if err != nil {
		return "", errors.New("rabbitmq-server is not installed (Debian: apt-get install rabbitmq-server)")
	}
	return p, nil
}

// freePorts returns n TCP ports on 127.0.0.1 that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Start runs a new broker and returns once it accepts AMQP connections. Its
// node name is unique; its AMQP listener, Erlang distribution port and epmd
// (Erlang's port mapper, a child of this process) use random ports on 127.0.0.1,
// so that it never meets a system broker's epmd on 4369; its database, logs
// and Erlang cookie live in a temporary directory. Stop it with [Broker.Stop].
func Start(ctx context.Context) (*Broker, error) {
	bin, err := server()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sessionwire-rabbitmq-")
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: temporary directory: %w", err)
	}
	for name, content := range map[string]string{"enabled_plugins": "[].\n", "rabbitmq-env.conf": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("rabbitmq: %w", err)
		}
	}
	node := fmt.Sprintf("sessionwire-%d-%d@localhost", os.Getpid(), ports[0])
	env := append(os.Environ(),
		"HOME="+dir, // the Erlang cookie
		"RABBITMQ_NODENAME="+node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(ports[0]),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(ports[1]),
		"ERL_EPMD_PORT="+strconv.Itoa(ports[2]),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "pid"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq"), // absent: the defaults
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
	)
	out, err := os.Create(filepath.Join(dir, "output"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	// epmd, Erlang's port mapper, runs as a child of ours rather than the
	// daemon the node would start, which would outlive a test killed
	// before it could stop it.
	epmd := exec.Command("epmd", "-port", strconv.Itoa(ports[2]), "-address", "127.0.0.1")
	epmd.Stdout, epmd.Stderr = out, out
	stopWithParent(epmd)
	if err := epmd.Start(); err != nil {
		_ = out.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("rabbitmq: start epmd (Erlang's port mapper, installed with rabbitmq-server): %w", err)
	}
	cmd := exec.Command(bin)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, out, out
	stopWithParent(cmd)
	if err = waitListening(fmt.Sprintf("127.0.0.1:%d", ports[2]), 10*time.Second); err != nil {
		err = fmt.Errorf("rabbitmq: epmd: %w", err)
	} else if err = cmd.Start(); err != nil {
		err = fmt.Errorf("rabbitmq: start %s: %w", bin, err)
	}
	if err != nil {
		_ = out.Close()
		_ = epmd.Process.Kill()
		_ = epmd.Wait()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	_ = out.Close() // the child has its own descriptor
	b := &Broker{URL: fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", ports[0]), addr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		dir: dir, cmd: cmd, epmd: epmd, exited: make(chan struct{})}
	go func() { b.err = cmd.Wait(); close(b.exited) }()

	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		conn, err := amqp.DialConfig(b.URL, amqp.Config{Dial: amqp.DefaultDial(time.Second)})
		if err == nil {
			_ = conn.Close()
			return b, nil
		}
		select {
		case <-b.exited:
			msg := fmt.Errorf("rabbitmq-server exited before accepting connections (%v); its output:\n%s", b.err, b.output())
			_ = b.Stop()
			return nil, msg
		case <-ctx.Done():
			msg := fmt.Errorf("rabbitmq-server did not accept connections on %s within %v: %w; its output:\n%s",
				b.URL, startTimeout, err, b.output())
			_ = b.Stop()
			return nil, msg
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitListening waits until addr accepts TCP connections.
func waitListening(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after %v: %w", addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// output is the end of what the broker printed and logged, for errors.
func (b *Broker) output() string {
	var parts []string
	files, _ := filepath.Glob(filepath.Join(b.dir, "log", "*.log"))
	for _, f := range append([]string{filepath.Join(b.dir, "output")}, files...) {
		data, err := os.ReadFile(f)
		if err != nil || len(data) == 0 {
			continue
		}
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		parts = append(parts, "--- "+filepath.Base(f)+"\n"+string(data))
	}
	return strings.Join(parts, "\n")
}

// Stop shuts the broker down as its own script does on SIGTERM (rabbitmqctl
// stop), kills it if it has not exited within 30 s, stops its epmd and
// removes its directory.
func (b *Broker) Stop() error {
	var errs []error
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		errs = append(errs, fmt.Errorf("rabbitmq: signal: %w", err))
	}
	select {
	case <-b.exited:
	case <-time.After(30 * time.Second):
		errs = append(errs, errors.New("rabbitmq-server did not stop within 30 s of SIGTERM; killed"))
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	// The script exits once rabbitmqctl stop returns; the node must be gone
	// by then.
	if conn, err := net.DialTimeout("tcp", b.addr, time.Second); err == nil {
		_ = conn.Close()
		errs = append(errs, fmt.Errorf("rabbitmq: %s still accepts connections after the broker stopped", b.addr))
	}
	if err := b.epmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		errs = append(errs, fmt.Errorf("rabbitmq: stop epmd: %w", err))
	}
	_ = b.epmd.Wait() // killed: the error says so
	if err := os.RemoveAll(b.dir); err != nil {
		errs = append(errs, fmt.Errorf("rabbitmq: %w", err))
	}
	return errors.Join(errs...)
}

// Shared is one broker for a test binary, started by the first test that
// asks for it. Declare one per package and call Stop from TestMain after
// m.Run.
type Shared struct {
	once sync.Once
	b    *Broker
	url  string
	err  error
}

// URL returns the URL of the package's broker: the one [URLEnv] names, or
// one started for it. When no broker can be had, the test fails in CI
// (CI=true), where the brokers are part of what is tested, and is skipped
// elsewhere, saying why and how to install one.
func (s *Shared) URL(t testing.TB) string {
	t.Helper()
	s.once.Do(func() {
		if u := os.Getenv(URLEnv); u != "" {
			s.url = u
			return
		}
		s.b, s.err = Start(context.Background())
		if s.err == nil {
			s.url = s.b.URL
		}
	})
	if s.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no RabbitMQ broker, which CI requires: %v", s.err)
		}
		t.Skipf("skipped: no RabbitMQ broker: %v (or set %s to a running broker's URL; CI=true makes this a failure)", s.err, URLEnv)
	}
	return s.url
}

// Stop stops the broker if one was started.
func (s *Shared) Stop() error {
	if s.b == nil {
		return nil
	}
	return s.b.Stop()
}
