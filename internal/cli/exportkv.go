package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/internal/lastgood"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// exportKVOpts are the flags of export kv.
type exportKVOpts struct {
	format, out string
}

func (a *app) exportKVCmd() *cobra.Command {
	var o exportKVOpts
	cmd := &cobra.Command{
		Use:   "kv [--format cloudflare|map] [--out FILE]",
		Short: "Print every country's decision entry as values for an edge KV store",
		Long: `export kv compiles the stored state as the agents do (pools, routes,
policy, live boosts and health) and prints one KV value per country: a key
for each ISO country code and one for _unknown, whose value is the JSON
{"format":1,"revision","epoch","written_at","synced_at","valid_until",
"stale","country","entry"}, entry being the country's entry of the agent's
table.idx (route, fallback_depth, affinity, candidates with merged attrs,
degraded). An edge worker (examples/js) normalizes CF-IPCountry and reads
that key: _unknown for a value that is not an assigned code; an assigned
code whose key is missing is an error (503), never _unknown's value, so
upload the whole export.

--format cloudflare (the default) prints the array that
"wrangler kv bulk put FILE --remote" takes: [{"key":"PL","value":"<JSON string>"},…]
(Wrangler 4 writes to local storage without --remote);
--format map prints one JSON object, key → value object. The output is
always JSON (-o does not apply). --out writes FILE atomically instead of
standard output. synced_at and written_at are the time of the read: a worker
marks decisions stale-table once they are older than its max age (the JS
library's default is 180 s; the example worker's REGIOND_MAX_AGE, 900 s),
and once the value's valid_until has passed: the first instant the table
changes that country's entry by the clock alone (a boost's expires_at;
absent when there is none: the export, one read, knows no health key's
deletion, so a health-checked pool without a live key is unhealthy in it
at once, with no grace window). Re-export on a timer
shorter than the max age, and after every change: a boost that ends and a
pool whose heartbeats stop change decisions with no write through
regionctl.`,
		Example: `  regionctl export kv --out kv.json && wrangler kv bulk put kv.json --binding REGIOND --remote
  regionctl export kv --format map | jq '.PL.entry.candidates'`,
		Args: exactArgs(0, "no arguments"),
	}
	f := cmd.Flags()
	f.StringVar(&o.format, "format", snapindex.KVFormatCloudflare, "cloudflare (wrangler kv bulk put) or map (key → value)")
	f.StringVar(&o.out, "out", "", "write this file (atomically) instead of standard output")
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		return a.runExportKV(ctx, o)
	})
	return cmd
}

func (a *app) runExportKV(ctx context.Context, o exportKVOpts) error {
	if o.format != snapindex.KVFormatCloudflare && o.format != snapindex.KVFormatMap {
		return usagef("--format %q: want %s or %s", o.format, snapindex.KVFormatCloudflare, snapindex.KVFormatMap)
	}
	cur, err := a.load(ctx)
	if err != nil {
		return err
	}
	refused := map[string]bool{} // of the skipped keys, those named with the value used, below
	for _, s := range cur.Skipped {
		refused[s.Key] = false
	}
	for _, kv := range cur.KVs {
		if _, skipped := refused[kv.Key]; skipped {
			refused[kv.Key] = lastgood.Refused(kv)
		}
	}
	for _, s := range cur.Skipped {
		if !refused[s.Key] {
			a.log.Warn("stored value skipped, as the agents skip it", "key", s.Key, "error", s.Error)
		}
	}
	now := time.Now()
	t, err := a.compileStored(ctx, cur, routing.CompileOptions{Now: now, Start: now.Add(-routing.DefaultHealthGrace)})
	if err != nil {
		return err
	}
	vs, err := snapindex.KVValues(t, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
	if err != nil {
		return err
	}
	b, err := snapindex.AppendKV(nil, vs, o.format)
	if err != nil {
		return err
	}
	if o.out == "" {
		_, err = a.stdout.Write(b)
		return err
	}
	// The directory must exist: a typo in --out is not a new directory.
	if fi, err := os.Stat(filepath.Dir(o.out)); err != nil || !fi.IsDir() {
		return usagef("--out %s: directory %s does not exist", o.out, filepath.Dir(o.out))
	}
	if err := atomicfile.WriteFile(o.out, b, 0o644); err != nil {
		return fmt.Errorf("export kv: write %s: %w", o.out, err)
	}
	return nil
}
