package routing

import (
	"testing"
	"time"
)

// TestUnhealthyInTheSnapshotHasNoStartGrace: a pool with health_check
// that the snapshot file's writer judged unhealthy, still without a health
// key at the first list after a restart, is unhealthy at once: it was
// healthy for the grace window from the agent's start, so a fleet
// restarted (a package upgrade) sent viewers to a dead origin on every
// node for that window (the docs review). A pool the file has healthy,
// whose keys went while no agent watched, keeps the window; a key put
// makes the first healthy.
func TestUnhealthyInTheSnapshotHasNoStartGrace(t *testing.T) {
	pools := []KV{
		{Key: "pools/eu-north", Value: []byte(`{"host":"north.example.net","residency":"eu","health_check":true}`)},
		{Key: "pools/eu-south", Value: []byte(`{"host":"south.example.net","residency":"eu","health_check":true}`)},
		{Key: "routes/_default", Value: []byte(`{"targets":[{"pool":"eu-north","weight":50},{"pool":"eu-south","weight":50}]}`)},
	}
	southKey := KV{Key: "health/eu-south/h1", Value: []byte(`{"addr":"10.0.0.2:443"}`)}
	start := time.Now().Add(-time.Hour)
	written := start.Add(time.Minute) // eu-north past its grace, eu-south live
	before := Compile(10, append(pools[:len(pools):len(pools)], southKey), nil, CompileOptions{Now: start, ClusterID: 0xa})
	if before.Healthy("eu-north", written) || !before.Healthy("eu-south", written) {
		t.Fatalf("before the restart: eu-north healthy %v, eu-south %v; want false, true", before.Healthy("eu-north", written), before.Healthy("eu-south", written))
	}
	b, err := before.JSON(written)
	if err != nil {
		t.Fatal(err)
	}
	loaded, _, err := LoadTableJSON(b)
	if err != nil {
		t.Fatal(err)
	}

	// The restart: the first list finds no health key of either.
	now := time.Now()
	after := Compile(20, pools, loaded, CompileOptions{Now: now, ClusterID: 0xa})
	if after.Healthy("eu-north", now) {
		t.Errorf("eu-north, unhealthy in the snapshot and without a key at the first list: healthy; want unhealthy at once")
	}
	if !after.Healthy("eu-south", now) {
		t.Errorf("eu-south, healthy in the snapshot: unhealthy at once; want the grace window from the start")
	}
	if after.Healthy("eu-south", now.Add(DefaultHealthGrace)) {
		t.Errorf("eu-south: healthy past the grace window")
	}
	// A file of another cluster (a replaced one) says nothing of this
	// one's origins: the window from the start, as without a file.
	if other := Compile(20, pools, loaded, CompileOptions{Now: now, ClusterID: 0xb}); !other.Healthy("eu-north", now) {
		t.Errorf("eu-north, unhealthy in another cluster's snapshot: unhealthy at once; want the grace window")
	}
	northKey := KV{Key: "health/eu-north/h1", Value: []byte(`{"addr":"10.0.0.1:443"}`)}
	if back := Compile(21, append(pools[:len(pools):len(pools)], northKey), after, CompileOptions{Now: now}); !back.Healthy("eu-north", now) {
		t.Errorf("eu-north with a health key again: unhealthy")
	}
}
