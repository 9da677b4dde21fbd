// Package clientv3test runs etcd's own Go client (go.etcd.io/etcd/client/v3,
// the version pinned in ../go.mod) against a real server binary: etcdq, or
// etcd 3.6 to check that the expectations are etcd's. The binary comes from
// ETCDQ_TEST_SERVER; both take etcd's flags. Every member listens on free
// loopback ports with a data dir under the test's temp dir and is killed
// (SIGKILL) when its test ends, passed or failed.
//
// Tests named TestCluster* start three members and time a failover; CTest
// runs them apart from the rest, alone on the machine (CMakeLists.txt).
package clientv3test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var serverBin string

func TestMain(m *testing.M) {
	serverBin = os.Getenv("ETCDQ_TEST_SERVER")
	if serverBin == "" {
		fmt.Fprintln(os.Stderr, "ETCDQ_TEST_SERVER must name the server binary (build/etcdq, or etcd 3.6 from scripts/etcd36.sh)")
		os.Exit(2)
	}
	if _, err := os.Stat(serverBin); err != nil {
		fmt.Fprintf(os.Stderr, "ETCDQ_TEST_SERVER: %v\n", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// How long a member or a cluster may take to answer after it is started.
const startTimeout = 30 * time.Second

type member struct {
	name      string
	dataDir   string
	clientURL string
	peerURL   string
	logPath   string
	cmd       *exec.Cmd
	exited    chan struct{} // closed once the process has been reaped
}

// Endpoint is the client URL without its scheme, as clientv3 takes it.
func (m *member) endpoint() string {
	return strings.TrimPrefix(strings.TrimPrefix(m.clientURL, "http://"), "https://")
}

func (m *member) alive() bool {
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (m *member) kill(t *testing.T) {
	t.Helper()
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("member %s (pid %d) still running 10 s after SIGKILL", m.name, m.cmd.Process.Pid)
	}
}

// serverTLS turns on TLS on the client URLs (--client-cert-auth when
// clientCertAuth).
type serverTLS struct {
	certFile, keyFile, caFile string
	clientCertAuth            bool
}

type clusterConfig struct {
	size      int
	extraArgs []string
	tls       *serverTLS
	// What the harness's own clients present when tls is set (the
	// readiness check, cluster.client).
	clientTLS *tls.Config
}

type cluster struct {
	t       *testing.T
	cfg     clusterConfig
	members []*member
}

// freePorts returns n distinct loopback ports that were free a moment ago:
// all are held open until all are picked, so they differ from one another.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("picking a free port: %v", err)
		}
		ls = append(ls, l)
		p := l.Addr().(*net.TCPAddr).Port
		if p == 2379 || p == 2380 {
			continue
		}
		ports = append(ports, p)
	}
	return ports
}

// startCluster starts cfg.size members as one new cluster and waits until
// each of them answers a linearizable read (so a leader is elected and every
// member knows it). A start whose port was taken in between (another test
// on this machine picked the same free port) is retried with new ports.
func startCluster(t *testing.T, cfg clusterConfig) *cluster {
	t.Helper()
	if cfg.size == 0 {
		cfg.size = 1
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		c := &cluster{t: t, cfg: cfg}
		err := c.start()
		if err == nil {
			return c
		}
		lastErr = err
		c.killAll()
		if !c.portTaken() {
			break
		}
		t.Logf("a port was taken, starting again with new ports: %v", err)
	}
	t.Fatalf("cluster of %d did not start: %v", cfg.size, lastErr)
	return nil
}

func (c *cluster) start() error {
	t := c.t
	ports := freePorts(t, 2*c.cfg.size)
	scheme := "http"
	if c.cfg.tls != nil {
		scheme = "https"
	}
	var initial []string
	for i := 0; i < c.cfg.size; i++ {
		dir := t.TempDir()
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			dataDir:   filepath.Join(dir, "data"),
			clientURL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i]),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			logPath:   filepath.Join(dir, "server.log"),
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL)
	}
	// Reverse order of registration: the members are killed before the
	// logs are read and before t.TempDir removes their directories.
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs()
		}
	})
	t.Cleanup(c.killAll)
	for _, m := range c.members {
		args := []string{
			"--name", m.name,
			"--data-dir", m.dataDir,
			"--listen-client-urls", m.clientURL,
			"--advertise-client-urls", m.clientURL,
			"--listen-peer-urls", m.peerURL,
			"--initial-advertise-peer-urls", m.peerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", "clientv3test-" + t.Name(),
		}
		if s := c.cfg.tls; s != nil {
			args = append(args, "--cert-file", s.certFile, "--key-file", s.keyFile, "--trusted-ca-file", s.caFile)
			if s.clientCertAuth {
				args = append(args, "--client-cert-auth")
			}
		}
		args = append(args, c.cfg.extraArgs...)
		if err := m.start(args); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(startTimeout)
	for _, m := range c.members {
		if err := c.waitReady(m, deadline); err != nil {
			return err
		}
	}
	return nil
}

func (m *member) start(args []string) error {
	logf, err := os.Create(m.logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(serverBin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	// The member dies with the test binary, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", serverBin, err)
	}
	m.cmd = cmd
	m.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(m.exited)
	}()
	return nil
}

// waitReady waits until m answers a linearizable Get (it then has a leader
// and has applied what that leader committed before the read).
func (c *cluster) waitReady(m *member, deadline time.Time) error {
	cli, err := c.rawClient([]string{m.endpoint()}, c.clientTLS())
	if err != nil {
		return err
	}
	defer cli.Close()
	var last error
	for time.Now().Before(deadline) {
		if !m.alive() {
			return fmt.Errorf("member %s exited during start-up (log %s): %s", m.name, m.logPath, tail(m.logPath, 20))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "clientv3test-ready")
		cancel()
		if err == nil {
			return nil
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("member %s not ready after %v: %v", m.name, startTimeout, last)
}

func (c *cluster) portTaken() bool {
	for _, m := range c.members {
		b, _ := os.ReadFile(m.logPath)
		if bytes.Contains(b, []byte("address already in use")) || bytes.Contains(b, []byte("Address already in use")) {
			return true
		}
	}
	return false
}

func (c *cluster) killAll() {
	for _, m := range c.members {
		if m.cmd != nil && m.alive() {
			m.kill(c.t)
		}
	}
}

func (c *cluster) dumpLogs() {
	for _, m := range c.members {
		c.t.Logf("---- last lines of %s's log (%s):\n%s", m.name, m.logPath, tail(m.logPath, 40))
	}
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.endpoint())
	}
	return eps
}

// clientTLS is what a client that the server accepts presents: nil without
// TLS. Tests that need other TLS settings build their own (tls_test.go).
func (c *cluster) clientTLS() *tls.Config {
	return c.cfg.clientTLS
}

func (c *cluster) rawClient(endpoints []string, tc *tls.Config, edits ...func(*clientv3.Config)) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		TLS:         tc,
		Logger:      zap.NewNop(),
	}
	for _, e := range edits {
		e(&cfg)
	}
	return clientv3.New(cfg)
}

// client is a client of every member, closed when the test ends.
func (c *cluster) client() *clientv3.Client {
	return c.clientOf(c.endpoints()...)
}

func (c *cluster) clientOf(endpoints ...string) *clientv3.Client {
	c.t.Helper()
	return c.clientWith(endpoints)
}

// clientWith is a client of endpoints whose configuration edits change.
func (c *cluster) clientWith(endpoints []string, edits ...func(*clientv3.Config)) *clientv3.Client {
	c.t.Helper()
	cli, err := c.rawClient(endpoints, c.clientTLS(), edits...)
	if err != nil {
		c.t.Fatalf("clientv3.New(%v): %v", endpoints, err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

// leader returns the member that the live members agree leads, waiting up
// to timeout for them to agree on one live member.
func (c *cluster) leader(timeout time.Duration) (*member, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		m, err := c.agreedLeader()
		if err == nil {
			return m, nil
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("no agreed leader within %v: %v", timeout, last)
}

func (c *cluster) agreedLeader() (*member, error) {
	byID := map[uint64]*member{}
	var leaderID uint64
	for _, m := range c.members {
		if !m.alive() {
			continue
		}
		cli, err := c.rawClient([]string{m.endpoint()}, c.clientTLS())
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		st, err := cli.Status(ctx, m.endpoint())
		cancel()
		cli.Close()
		if err != nil {
			return nil, fmt.Errorf("status of %s: %w", m.name, err)
		}
		byID[st.Header.MemberId] = m
		if st.Leader == 0 {
			return nil, fmt.Errorf("%s has no leader", m.name)
		}
		if leaderID != 0 && st.Leader != leaderID {
			return nil, fmt.Errorf("members disagree on the leader (%x, %x)", leaderID, st.Leader)
		}
		leaderID = st.Leader
	}
	m, ok := byID[leaderID]
	if !ok {
		return nil, fmt.Errorf("leader %x is not a live member", leaderID)
	}
	return m, nil
}

// eventually polls cond every 20 ms until it returns nil or timeout passes,
// then fails the test with cond's last error.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// must(f())(t) is f's result, or the test fails on f's error.
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}
