// Package redisserver starts redis-server processes on loopback ports for
// the tests and the demo: `redis-server --port P --bind 127.0.0.1 --save ”
// --appendonly no`, nothing kept on disk.
package redisserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startWait bounds how long Start waits for a new server to answer PING.
const startWait = 10 * time.Second

// Installed reports whether redis-server is on the PATH.
func Installed() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// Server is one redis-server process. Its methods are safe for concurrent
// use; Close ends it.
type Server struct {
	Addr  string // 127.0.0.1:port
	port  int
	dir   string   // the working directory, if not the current one
	extra []string // more arguments

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	out  *bytes.Buffer
}

// Start starts a redis-server on a free loopback port and waits until it
// answers.
func Start() (*Server, error) { return start("") }

// start is Start, with the server in cluster mode (its node file in dir)
// if dir is not empty.
func start(dir string) (*Server, error) {
	var errs []error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port}
		if dir != "" {
			s.dir = dir
			// Without full coverage, the masters alive serve their slots
			// when one dies, as a Cluster should for the tests.
			s.extra = []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes-" + strconv.Itoa(port) + ".conf",
				"--cluster-require-full-coverage", "no"}
		}
		if err := s.Restart(); err != nil {
			errs = append(errs, err)
			continue
		}
		return s, nil
	}
	return nil, errors.Join(errs...)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Restart starts the server again on its port, empty (after Kill), and
// waits until it answers.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("redisserver: already running")
	}
	out := &bytes.Buffer{}
	cmd := exec.Command("redis-server", append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no"}, s.extra...)...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(startWait)
	for !ping(s.Addr) {
		select {
		case <-done:
			return fmt.Errorf("redisserver: redis-server on port %d exited: %s", s.port, strings.TrimSpace(out.String()))
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redisserver: redis-server on port %d did not answer within %v", s.port, startWait)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	s.cmd, s.done, s.out = cmd, done, out
	return nil
}

// ping reports whether a Redis server at addr answers PING.
func ping(addr string) bool {
	line, _ := ask(addr, "PING")
	return strings.HasPrefix(line, "+PONG")
}

// ask sends one inline command to the server at addr and returns its
// answer's first line and, for a bulk string, its body.
func ask(addr, command string) (string, string) {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return "", ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(command + "\r\n")); err != nil {
		return "", ""
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", ""
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if !strings.HasPrefix(line, "$") || err != nil || n < 0 {
		return line, ""
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return line, ""
	}
	return line, string(body)
}

// Kill ends the server at once (SIGKILL), as a crash would, and waits for
// it to exit. Killing a server that is not running does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Close ends the server if it runs.
func (s *Server) Close() { s.Kill() }

// Cluster is a Redis Cluster of three masters, no replicas.
type Cluster struct {
	Addrs []string
	nodes []*Server
	dir   string
}

// StartCluster starts three cluster-mode servers on free loopback ports,
// joins them with redis-cli --cluster create, and waits until the cluster
// is ok.
func StartCluster() (*Cluster, error) {
	dir, err := os.MkdirTemp("", "redisserver-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	for range 3 {
		s, err := start(dir)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.nodes = append(c.nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	create := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, c.Addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redisserver: redis-cli --cluster create: %v: %s", err, out)
	}
	deadline := time.Now().Add(startWait)
	for _, addr := range c.Addrs {
		for {
			if _, info := ask(addr, "CLUSTER INFO"); strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				return nil, fmt.Errorf("redisserver: the cluster was not ok within %v", startWait)
			}
			time.Sleep(20 * time.Millisecond) // polling the new cluster, bounded
		}
	}
	return c, nil
}

// Kill ends the node at addr at once (SIGKILL), as a crash would.
func (c *Cluster) Kill(addr string) {
	for _, s := range c.nodes {
		if s.Addr == addr {
			s.Kill()
		}
	}
}

// Close ends the cluster's servers and removes their node files.
func (c *Cluster) Close() {
	for _, s := range c.nodes {
		s.Close()
	}
	_ = os.RemoveAll(c.dir)
}
