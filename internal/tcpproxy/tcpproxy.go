// Package tcpproxy is a loopback TCP proxy that tests can sever and restore,
// to cut an agent off from etcd without stopping etcd, or freeze and thaw,
// to have the path between them go silent without closing anything.
package tcpproxy

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/regiond/regiond/internal/freeport"
)

// Proxy forwards connections from a loopback listener to a target address.
type Proxy struct {
	target string
	addr   string
	// copyUp carries each client's bytes to the target (io.Copy when nil).
	copyUp func(dst io.Writer, src io.Reader)

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	stopped bool
	// open is closed while bytes flow; Freeze replaces it with one that
	// Thaw closes. replies is the same for the bytes from the target to
	// the clients alone (FreezeReplies).
	open    chan struct{}
	replies chan struct{}
}

// New starts a proxy on a free loopback port forwarding to target. The
// port comes from freeport (on Linux outside the kernel's ephemeral
// range): Restore listens on it again after Sever, and a port the kernel
// chose could meanwhile be given to another socket.
func New(target string) (*Proxy, error) { return NewCopying(target, nil) }

// NewCopying is New with copyUp carrying the bytes from each client to the
// target instead of io.Copy, so that a test can read what clients send on
// the way. copyUp must copy src to dst until either fails.
func NewCopying(target string, copyUp func(dst io.Writer, src io.Reader)) (*Proxy, error) {
	var ln net.Listener
	for attempt := 1; ; attempt++ {
		port, err := freeport.Get()
		if err != nil {
			return nil, fmt.Errorf("tcpproxy: %w", err)
		}
		// A port free when freeport checked it may be taken by now (by
		// a process that does not use freeport): take another.
		if ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			break
		} else if attempt == 5 {
			return nil, fmt.Errorf("tcpproxy: listen: %w", err)
		}
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), copyUp: copyUp, conns: map[net.Conn]struct{}{}, open: make(chan struct{}), replies: make(chan struct{})}
	close(p.open)
	close(p.replies)
	p.serve(ln)
	return p, nil
}

// Addr returns the proxy's listen address (host:port). It stays the same
// across Sever and Restore.
func (p *Proxy) Addr() string { return p.addr }

// URL returns "http://" + Addr().
func (p *Proxy) URL() string { return "http://" + p.addr }

// serve accepts on ln until it is closed; a proxy closed meanwhile (a
// Restore racing Close) closes ln instead. The WaitGroup is added to
// under the lock Close sets stopped under, so Close's Wait sees it.
func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		ln.Close()
		return
	}
	p.ln = ln
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go p.pipe(c)
		}
	}()
}

func (p *Proxy) pipe(c net.Conn) {
	defer p.wg.Done()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst gated, src net.Conn, copy func(io.Writer, io.Reader)) {
		copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	plain := func(dst io.Writer, src io.Reader) { io.Copy(dst, src) }
	copyUp := p.copyUp
	if copyUp == nil {
		copyUp = plain
	}
	go cp(gated{p, up, false}, c, copyUp)
	go cp(gated{p, c, true}, up, plain)
	<-done
	<-done
	p.untrack(c, up)
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// gated is one direction of a connection: each write waits while the
// proxy is frozen (reply: the direction to the client, which waits while
// replies are frozen too).
type gated struct {
	p *Proxy
	net.Conn
	reply bool
}

func (g gated) Write(b []byte) (int, error) {
	g.p.mu.Lock()
	open, replies := g.p.open, g.p.replies
	g.p.mu.Unlock()
	<-open
	if g.reply {
		<-replies
	}
	return g.Conn.Write(b)
}

// Freeze stops carrying bytes, in both directions, on every connection,
// those accepted meanwhile too, without closing any: what a path that
// drops every packet looks like to both ends (a dead switch, a firewall's
// DROP), which only a timeout of theirs notices. What is sent meanwhile
// is held, and delivered by Thaw, as TCP retransmits across a partition
// that heals. One difference: a new connection still completes its TCP
// handshake with the proxy (then carries nothing), where on a real
// dropped path the SYN is lost and the dial itself times out.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // frozen already
	}
}

// FreezeReplies stops carrying bytes from the target to the clients
// alone: what clients send still arrives and is acted on, and the
// answers are held (delivered by Thaw): a request that the server applies
// while its client times out waiting for the answer.
func (p *Proxy) FreezeReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.replies:
		p.replies = make(chan struct{})
	default: // frozen already
	}
}

// Thaw carries bytes again, in both directions, those held first.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range []*chan struct{}{&p.open, &p.replies} {
		select {
		case <-*c:
		default:
			close(*c)
		}
	}
}

// Sever closes every open connection and stops accepting new ones until
// Restore. It thaws a frozen proxy: what it held is dropped with the
// connections.
func (p *Proxy) Sever() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.Thaw()
}

// Restore accepts connections again on the same address.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	if p.ln != nil || p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("tcpproxy: relisten on %s: %w", p.addr, err)
	}
	p.serve(ln)
	return nil
}

// Close severs everything and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.Sever()
	p.wg.Wait()
	return nil
}
