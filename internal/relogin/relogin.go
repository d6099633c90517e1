// Package relogin renews an etcd client's login when etcd holds the
// client's requests instead of refusing their token.
//
// etcd's simple tokens ("<random>.<raft index>", its default
// --auth-token) are checked by waiting, until the request's deadline, for
// the member to reach the raft index the token names (etcd v3.7.3,
// auth/simple_token.go, isValidSimpleToken). A cluster restored from a
// backup starts its raft log again, far below the index of the tokens its
// clients got before: their requests time out instead of failing with
// "invalid auth token", the error on which clientv3 logs in again for a
// unary call, and a client whose only requests are unary (an agent
// retrying its list, a heartbeat's grant) times out for good, through a
// grpc-proxy or not, until it is restarted. clientv3 also logs in at each
// new stream: Interceptor opens one, and closes it, after a request that
// timed out, so that the next request carries a token of the cluster that
// answers it.
package relogin

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// Every is how often at most a client logs in again after timeouts: a
// login costs etcd a bcrypt check, and an etcd too busy to answer in time
// must not get one per request of every client.
const Every = 30 * time.Second

// authenticate is etcd's login method, which carries no token.
const authenticate = "/etcdserverpb.Auth/Authenticate"

// watchStream is the stream opened to log in: clientv3's stream
// interceptor logs in before any stream it opens.
const watchStream = "/etcdserverpb.Watch/Watch"

// renewTimeout bounds a login: etcd's bcrypt check of the password can
// take seconds on a loaded member, and a login given up that early would
// never be done.
const renewTimeout = 30 * time.Second

// Interceptor returns a unary client interceptor, for a clientv3 client
// that logs in with a password (clientv3.Config.DialOptions), that makes
// the client log in again, in the background, after a request that timed
// out on a ready connection, at most once per every (Every when 0). A client without a user
// opens a stream for nothing, as often.
func Interceptor(every time.Duration) grpc.UnaryClientInterceptor {
	if every <= 0 {
		every = Every
	}
	var last atomic.Int64 // when the last login was started, UnixNano; 0: never
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		// A timeout while the connection is down says nothing of the
		// token: a login then would spend the next every for nothing.
		if err == nil || method == authenticate || !timedOut(err) || cc.GetState() != connectivity.Ready {
			return err
		}
		now, prev := time.Now().UnixNano(), last.Load()
		if prev != 0 && now-prev < int64(every) || !last.CompareAndSwap(prev, now) {
			return err
		}
		go renew(cc)
		return err
	}
}

// renew opens a watch stream on cc, which logs the client in again (or
// fails to, when etcd does not answer), and closes it. It gives up after
// renewTimeout.
func renew(cc *grpc.ClientConn) {
	ctx, cancel := context.WithTimeout(context.Background(), renewTimeout)
	defer cancel()
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true, ClientStreams: true}, watchStream)
	if err == nil {
		s.CloseSend()
	}
}

// timedOut reports whether err is a request's deadline passing.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
}
