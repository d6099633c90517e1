package store

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TTL returns the remaining life of a lease; 0 when it has ended.
func (s *Store) TTL(ctx context.Context, lease int64) (time.Duration, error) {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.TimeToLive(rctx, clientv3.LeaseID(lease))
	if err != nil {
		return 0, s.rpcErr(fmt.Sprintf("read lease %x", lease), err)
	}
	if resp.TTL <= 0 {
		return 0, nil
	}
	return time.Duration(resp.TTL) * time.Second, nil
}
