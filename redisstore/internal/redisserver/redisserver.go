// Package redisserver starts redis-server processes on loopback ports for
// the tests and the demo: `redis-server --port P --bind 127.0.0.1 --save ”
// --appendonly no`, nothing kept on disk.
package redisserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
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
	Addr string // 127.0.0.1:port
	port int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	out  *bytes.Buffer
}

// Start starts a redis-server on a free loopback port and waits until it
// answers.
func Start() (*Server, error) {
	var errs []error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port}
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
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
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
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
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
