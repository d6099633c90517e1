package etcddiag

import (
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestInvalidTokenTellsADroppedTokenFromARefusal: etcd's token errors,
// wrapped, are a dropped token; a refused login, a permission and no
// leader are not (the heartbeat logs a refusal at ERROR once, and retries
// a dropped token quietly). The text form, a watch's cancel reason, is
// checked on real etcd by TestTokenDroppedKnowsAWatchRefusedOnItsStream
// (internal/store).
func TestInvalidTokenTellsADroppedTokenFromARefusal(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("watch /p/routing/health/a/b: %w", rpctypes.ErrGRPCInvalidAuthToken), true},
		{fmt.Errorf("watch /p/routing/health/a/b: %w", rpctypes.ErrInvalidAuthToken), true},
		{fmt.Errorf("read /p/routing/health/a/b: %w", rpctypes.ErrAuthFailed), false},
		{fmt.Errorf("watch /p/routing/health/a/b: %w", rpctypes.ErrGRPCPermissionDenied), false},
		{fmt.Errorf("watch /p/routing/health/a/b: %w", rpctypes.ErrGRPCNoLeader), false},
	} {
		if got := InvalidToken(c.err); got != c.want {
			t.Errorf("InvalidToken(%v) = %v; want %v", c.err, got, c.want)
		}
	}
}
