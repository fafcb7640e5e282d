package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// nodeConfig is one server of a local NATS cluster (--role nats-node).
type nodeConfig struct {
	name        string
	port        int
	clusterPort int
	routes      string
	storeDir    string
}

// runNATSNode is a NATS server with JetStream, one node of a cluster: the
// nats-server module this program already embeds, in its own process, so
// that it can be killed like a lost host. It stops on SIGTERM.
func runNATSNode(ctx context.Context, n nodeConfig) error {
	if n.name == "" || n.port == 0 || n.clusterPort == 0 || n.storeDir == "" || n.routes == "" {
		return errors.New("--role nats-node needs --node-name, --node-port, --node-cluster-port, --node-routes and --node-store")
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: n.name, Host: "127.0.0.1", Port: n.port, JetStream: true, StoreDir: n.storeDir,
		Cluster: server.ClusterOpts{Name: "sessionwire", Host: "127.0.0.1", Port: n.clusterPort},
		Routes:  server.RoutesFromStr(n.routes), NoLog: true, NoSigs: true,
	})
	if err != nil {
		return fmt.Errorf("nats node %s: %w", n.name, err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return fmt.Errorf("nats node %s was not ready within 10s", n.name)
	}
	fmt.Printf("ready nats-node %s\n", ns.ClientURL())
	<-ctx.Done()
	ns.Shutdown()
	ns.WaitForShutdown()
	return nil
}

// natsCluster is a local NATS cluster: each node a process of this program
// (--role nats-node) on 127.0.0.1, its ports chosen when the cluster starts
// and kept, so a killed node restarts where its peers expect it, with its
// store.
type natsCluster struct {
	dir   string
	nodes []nodeConfig
	mu    sync.Mutex
	procs []*exec.Cmd // nil for a node that is down
}

// startNATSCluster starts n nodes and waits until JetStream is available.
func startNATSCluster(ctx context.Context, n int) (_ *natsCluster, err error) {
	dir, err := os.MkdirTemp("", "sessionwire-cluster-*")
	if err != nil {
		return nil, fmt.Errorf("create the cluster's store directory: %w", err)
	}
	c := &natsCluster{dir: dir, procs: make([]*exec.Cmd, n)}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	for i := range n {
		c.nodes = append(c.nodes, nodeConfig{name: fmt.Sprint("n", i+1), port: ports[i], clusterPort: ports[n+i],
			routes: strings.Join(routes, ","), storeDir: filepath.Join(dir, fmt.Sprint("n", i+1))})
	}
	for i := range n {
		if err := c.start(i); err != nil {
			return nil, err
		}
	}
	return c, c.waitJetStream(ctx, 60*time.Second)
}

// freePorts picks n free loopback ports: listen on port 0, note, close.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a port for a NATS node: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// url is every node's client URL: a client connects to any and fails over.
func (c *natsCluster) url() string {
	var urls []string
	for _, n := range c.nodes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", n.port))
	}
	return strings.Join(urls, ",")
}

// start starts node i and waits for its ready line.
func (c *natsCluster) start(i int) error {
	n := c.nodes[i]
	cmd, _, err := spawnReady("nats-node", "--role", "nats-node", "--node-name", n.name, "--node-port", fmt.Sprint(n.port),
		"--node-cluster-port", fmt.Sprint(n.clusterPort), "--node-routes", n.routes, "--node-store", n.storeDir)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs[i] = cmd
	c.mu.Unlock()
	return nil
}

// kill ends node i with SIGKILL, as a lost host: no goodbye to its peers.
func (c *natsCluster) kill(i int) error {
	c.mu.Lock()
	cmd := c.procs[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("nats node %s is not running", c.nodes[i].name)
	}
	if err := cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill nats node %s: %w", c.nodes[i].name, err)
	}
	_ = cmd.Wait()
	return nil
}

// index is the position of the node named name, or -1.
func (c *natsCluster) index(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	return -1
}

// waitJetStream waits until the cluster has elected its JetStream leader.
func (c *natsCluster) waitJetStream(ctx context.Context, within time.Duration) error {
	nc, err := nats.Connect(c.url())
	if err != nil {
		return fmt.Errorf("connect to the local NATS cluster: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("open JetStream on the local NATS cluster: %w", err)
	}
	return retry(ctx, within, func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		return err
	})
}

// stop ends every node (SIGTERM, then SIGKILL after 5 s) and removes the stores.
func (c *natsCluster) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range c.procs {
		if cmd != nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for i, cmd := range c.procs {
		if cmd != nil {
			t := time.AfterFunc(5*time.Second, func() { _ = cmd.Process.Kill() })
			_ = cmd.Wait()
			t.Stop()
			c.procs[i] = nil
		}
	}
	os.RemoveAll(c.dir)
}

// spawnReady starts this program with args and waits for its first line,
// "ready <role> [url]"; it returns the process and the url.
func spawnReady(role string, args ...string) (*exec.Cmd, string, error) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), childEnv+"=1") // part of this run: no warning of its own about the demo key
	// Its own process group: a Ctrl-C on the terminal reaches this process
	// alone, which then stops its children in order (workers and router
	// before the NATS servers they use), instead of every process dying at
	// once and the survivors printing pages of connection errors.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", fmt.Errorf("start a %s process: %w", role, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start a %s process: %w", role, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	fields := strings.Fields(line)
	if err != nil || len(fields) < 2 || fields[0] != "ready" || fields[1] != role {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, "", fmt.Errorf("a %s process did not become ready (%q): %v", role, line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	url := ""
	if len(fields) > 2 {
		url = fields[2]
	}
	return cmd, url, nil
}
