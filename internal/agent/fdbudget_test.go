package agent

import (
	"strings"
	"testing"
)

func TestFDBudget(t *testing.T) {
	for _, tc := range []struct {
		name                               string
		maxConns, maxBlocking, reserve, ls int
		limit, inUse                       uint64
		conns, blocking                    int
		err                                string
	}{
		{name: "fits", maxConns: 256, maxBlocking: 128, reserve: 64, ls: 2, limit: 1 << 20, inUse: 20, conns: 256, blocking: 128},
		{name: "unknown limit", maxConns: 256, maxBlocking: 128, reserve: 64, ls: 2, limit: 0, conns: 256, blocking: 128},
		{name: "1024, two listeners", maxConns: 512, maxBlocking: 128, reserve: 64, ls: 2, limit: 1024, inUse: 24, conns: 468, blocking: 128},
		{name: "lowered below the blocking cap", maxConns: 256, maxBlocking: 128, reserve: 64, ls: 2, limit: 256, inUse: 16, conns: 88, blocking: 44},
		{name: "one listener gets all", maxConns: 256, maxBlocking: 16, reserve: 64, ls: 1, limit: 128, inUse: 14, conns: 50, blocking: 16},
		{name: "too few", maxConns: 256, maxBlocking: 16, reserve: 64, ls: 2, limit: 64, inUse: 10, err: "raise the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conns, blocking, err := fdBudget(tc.maxConns, tc.maxBlocking, tc.reserve, tc.ls, tc.limit, tc.inUse)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--fd-reserve") {
					t.Fatalf("err = %v, want one saying %q and naming --fd-reserve", err, tc.err)
				}
				return
			}
			if err != nil || conns != tc.conns || blocking != tc.blocking {
				t.Fatalf("= %d, %d, %v; want %d, %d", conns, blocking, err, tc.conns, tc.blocking)
			}
			if tc.limit > 0 && uint64(conns*tc.ls)+tc.inUse+uint64(tc.reserve) > tc.limit {
				t.Fatalf("%d connections × %d listeners + %d in use + %d reserve exceed the limit %d", conns, tc.ls, tc.inUse, tc.reserve, tc.limit)
			}
		})
	}
}
