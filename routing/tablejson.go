package routing

import (
	"encoding/json"
	"fmt"
)

// This file is the wire shape of the table JSON (docs/agent.md) as
// encoding/json reads and writes it: the reference the fast encoders
// (render.go, sections.go, poolenc.go) are tested against, and what a
// snapshot file is loaded through (loadjson.go).

// tableJSON is the wire shape of /v1/table and of the snapshot file
// (docs/agent.md).
type tableJSON struct {
	Revision  int64                 `json:"revision"`
	Epoch     int64                 `json:"epoch"`
	WrittenAt string                `json:"written_at"`
	SyncedAt  string                `json:"synced_at,omitempty"`
	Stale     bool                  `json:"stale"`
	ClusterID string                `json:"cluster_id,omitempty"`
	Pools     map[string]poolJSON   `json:"pools"`
	Routes    map[string]*Route     `json:"routes"`
	Policy    policyJSON            `json:"policy"`
	Effective map[string]*Effective `json:"effective"`
	Skipped   []Skipped             `json:"skipped"`
	Overrides map[string]*Override  `json:"overrides,omitempty"`
}

type policyJSON struct {
	Residency Residency `json:"residency"`
}

// poolJSON is a pool plus its health as seen by the table.
type poolJSON struct {
	Pool
	Healthy bool
}

func (p poolJSON) MarshalJSON() ([]byte, error) {
	extra := Extra{}
	for k, v := range p.Extra {
		extra[k] = v
	}
	extra["healthy"] = json.RawMessage(fmt.Sprint(p.Healthy))
	type plain Pool
	return encodeWithExtra(plain(p.Pool), extra)
}

func (p *poolJSON) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &p.Pool); err != nil {
		return err
	}
	raw, ok := p.Extra["healthy"]
	delete(p.Extra, "healthy")
	if len(p.Extra) == 0 {
		p.Extra = nil
	}
	if !ok {
		return fmt.Errorf("pool has no healthy field")
	}
	return json.Unmarshal(raw, &p.Healthy)
}
