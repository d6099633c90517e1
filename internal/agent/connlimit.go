package agent

import (
	"net"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// connLimit is a listener that keeps at most cap(sem) connections open. At
// the cap it closes an idle keep-alive connection to make room, or else
// stops accepting until one closes: new connections then wait in the
// kernel's backlog, taking no file descriptor of the process. Set its
// connState as the http.Server's ConnState.
type connLimit struct {
	net.Listener
	sem       chan struct{} // one token per open connection
	done      chan struct{} // closed by Close
	room      chan struct{} // a slot was freed (buffered: one wake pending)
	closeOnce sync.Once
	m         connMetrics

	mu      sync.Mutex
	idle    map[net.Conn]struct{} // connections between requests
	starved bool                  // Accept waits for a slot: close idle connections at once
}

// connMetrics are one listener's series of the connection metrics.
type connMetrics struct {
	open, limit       prometheus.Gauge
	waits, idleClosed prometheus.Counter
}

// connVecs are the agent's connection metrics, by listener.
type connVecs struct {
	open, limit       *prometheus.GaugeVec
	waits, idleClosed *prometheus.CounterVec
}

func newConnVecs(reg prometheus.Registerer) connVecs {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "regiond", Subsystem: "api", Name: name, Help: help}, []string{"listener"})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "regiond", Subsystem: "api", Name: name, Help: help}, []string{"listener"})
	}
	v := connVecs{
		open:  gauge("connections_open", "Open API connections, by listener (unix, tcp)."),
		limit: gauge("connections_limit", "The most API connections a listener keeps open (--max-connections, lowered to fit the file descriptor limit)."),
		waits: counter("connection_limit_waits_total", "Times a listener reached its connection limit and stopped accepting until a connection closed."),
		idleClosed: counter("idle_connections_closed_total",
			"Idle keep-alive API connections closed to make room for a new connection at the limit."),
	}
	reg.MustRegister(v.open, v.limit, v.waits, v.idleClosed)
	return v
}

// limitListener wraps ln, keeping at most max connections open.
func limitListener(ln net.Listener, max int, name string, v connVecs) *connLimit {
	l := &connLimit{Listener: ln, sem: make(chan struct{}, max), done: make(chan struct{}), room: make(chan struct{}, 1),
		idle: map[net.Conn]struct{}{}, m: connMetrics{open: v.open.WithLabelValues(name),
			limit: v.limit.WithLabelValues(name), waits: v.waits.WithLabelValues(name),
			idleClosed: v.idleClosed.WithLabelValues(name)}}
	l.m.limit.Set(float64(max))
	return l
}

// Accept waits for room, then accepts a connection.
func (l *connLimit) Accept() (net.Conn, error) {
	if err := l.acquire(); err != nil {
		return nil, err
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.release()
		return nil, err
	}
	l.m.open.Inc()
	return &limitedConn{Conn: c, l: l}, nil
}

// acquire takes a slot, closing an idle connection to free one at the cap,
// or waiting for a connection to close.
func (l *connLimit) acquire() error {
	// One critical section from the check to the close: a slot freed
	// meanwhile (a client hung up) is taken, and no idle connection is
	// closed below the cap.
	l.mu.Lock()
	select {
	case l.sem <- struct{}{}:
		l.mu.Unlock()
		return nil
	default:
	}
	l.m.waits.Inc()
	l.starved = true
	for c := range l.idle {
		l.closeIdleLocked(c)
		break
	}
	l.mu.Unlock()
	for !l.take() {
		select {
		case <-l.room:
		case <-l.done:
			l.mu.Lock()
			l.starved = false
			l.mu.Unlock()
			return net.ErrClosed
		}
	}
	return nil
}

// take takes a free slot, if any, and ends a starvation in the same
// critical section: a connection turning idle just after the slot was
// taken is kept (it was closed when starved was cleared later).
func (l *connLimit) take() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.sem <- struct{}{}:
		l.starved = false
		return true
	default:
		return false
	}
}

// release frees a slot and wakes a waiting acquire.
func (l *connLimit) release() {
	<-l.sem
	select {
	case l.room <- struct{}{}:
	default: // a wake is pending already
	}
}

// closeIdleLocked closes an idle connection; l.mu is held. Its
// limitedConn.Close frees the slot.
func (l *connLimit) closeIdleLocked(c net.Conn) {
	delete(l.idle, c)
	l.m.idleClosed.Inc()
	c.Close()
}

// connState tracks idle connections (http.Server.ConnState). A connection
// that turns idle while Accept waits for room is closed at once.
func (l *connLimit) connState(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateIdle:
		// Closed only while Accept waits and no slot is free: one freed
		// meanwhile is Accept's without this connection's.
		if l.starved && len(l.sem) == cap(l.sem) {
			l.closeIdleLocked(c)
			return
		}
		l.idle[c] = struct{}{}
	default:
		delete(l.idle, c)
	}
}

// Close closes the listener and ends a waiting Accept.
func (l *connLimit) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitedConn frees its listener's slot when closed, once.
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

// Close closes the connection and frees its slot.
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.m.open.Dec()
		c.l.release()
	})
	return err
}
