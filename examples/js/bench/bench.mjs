// Speed of the JS reader, each figure the median of ROUNDS rounds with its
// baseline measured in the same run (go test -run XXX -bench JSReader
// ./examples/js runs it on the example fleet; or by hand:
// node bench.mjs table.idx kv.json [ROUNDS]).
//
// Prints one JSON object: {name: {median_ns, baseline, baseline_ns, ratio}}.
import { openSync, closeSync, readFileSync, statSync } from 'node:fs';
import { decideFromIndexFile, decideFromIndexFileAsync, decideFromValue, IndexReader, pickSticky, valueEntry } from '../node.mjs';
import { hashTop53 } from '../xxh64.mjs';
import { hashTop53BigInt } from './xxh64_bigint.mjs';

const [idx, kvPath, roundsArg] = process.argv.slice(2);
const ROUNDS = Number(roundsArg ?? 7);
const kv = new Map(JSON.parse(readFileSync(kvPath, 'utf8')).map(({ key, value }) => [key, value]));
const countries = ['PL', 'DE', 'US', 'BR', 'JP', 'KR', 'IN', 'FR', 'xx', ''];
const keys = Array.from({ length: 1024 }, (_, i) => `viewer-${i * 7919}-session`);
const enc = new TextEncoder();
const hashIn = keys.map((k) => enc.encode(k + '\0eu-central'));

// ns per op of f over n ops, median of ROUNDS rounds (after one warm-up).
function median(n, f) {
  const rs = [];
  for (let r = 0; r <= ROUNDS; r++) {
    const t = process.hrtime.bigint();
    for (let i = 0; i < n; i++) f(i);
    const ns = Number(process.hrtime.bigint() - t) / n;
    if (r > 0) rs.push(ns);
  }
  rs.sort((a, b) => a - b);
  return rs[rs.length >> 1];
}

async function medianAsync(n, f) {
  const rs = [];
  for (let r = 0; r <= ROUNDS; r++) {
    const t = process.hrtime.bigint();
    for (let i = 0; i < n; i++) await f(i);
    const ns = Number(process.hrtime.bigint() - t) / n;
    if (r > 0) rs.push(ns);
  }
  rs.sort((a, b) => a - b);
  return rs[rs.length >> 1];
}

const out = {};
function report(name, ns, baseline, baseNs) {
  out[name] = { median_ns: Math.round(ns), baseline, baseline_ns: Math.round(baseNs), ratio: +(ns / baseNs).toFixed(2) };
}

let sink = 0;
// The index's owner named, as a front door does (the bench's file is its own).
const own = { owner: process.getuid() };
const noRoute = (f) => { try { return f(); } catch (err) { if (err.name !== 'NoRouteError') throw err; return null; } };

// The index on Node: a decision per call (open, 3 positioned reads, close)
// against the floor of opening and closing the file.
const openClose = median(20000, () => closeSync(openSync(idx, 'r')));
const fromIndex = median(20000, (i) => { sink ^= noRoute(() => decideFromIndexFile(idx, countries[i % 10], keys[i & 1023], own))?.revision ?? 0; });
report('index_decision_sync', fromIndex, 'open+close', openClose);
const fromIndexAsync = await medianAsync(5000, async (i) => {
  try { sink ^= (await decideFromIndexFileAsync(idx, countries[i % 10], keys[i & 1023], own)).revision; } catch (err) { if (err.name !== 'NoRouteError') throw err; }
});
report('index_decision_async', fromIndexAsync, 'index_decision_sync', fromIndex);
// The caching IndexReader: a stat per call, entries read once per file,
// against the sync reader and against the stat alone.
const reader = new IndexReader(idx, own);
const fromReader = median(20000, (i) => { sink ^= noRoute(() => reader.decide(countries[i % 10], keys[i & 1023]))?.revision ?? 0; });
report('index_reader_decision', fromReader, 'index_decision_sync', fromIndex);
const statOnly = median(20000, () => { sink ^= statSync(idx).size & 1; });
report('index_reader_decision_vs_stat', fromReader, 'stat', statOnly);

// A KV value in a Worker: decode (JSON.parse of the string, as KV's
// {type: 'json'} does) and pick, against JSON.parse alone.
const vals = countries.map((c) => kv.get(c.toUpperCase()) ?? kv.get('_unknown'));
const parseOnly = median(50000, (i) => { sink ^= JSON.parse(vals[i % 10]).revision; });
const decodePick = median(50000, (i) => { sink ^= noRoute(() => decideFromValue(vals[i % 10], keys[i & 1023]))?.revision ?? 0; });
report('kv_value_decode_and_pick', decodePick, 'JSON.parse', parseOnly);
const entries = vals.map((v) => valueEntry(v).entry);
const pickOnly = median(200000, (i) => { sink ^= pickSticky(entries[0].candidates, keys[i & 1023]); });
report('sticky_pick_PL', pickOnly, 'JSON.parse', parseOnly);

// xxh64 of a 30-byte input: 32-bit halves against BigInt.
const big = median(200000, (i) => { sink ^= hashTop53BigInt(hashIn[i & 1023]); });
const halves = median(200000, (i) => { sink ^= hashTop53(hashIn[i & 1023]); });
report('xxh64_halves', halves, 'xxh64_bigint', big);

out.sink = sink & 1;
out.node = process.versions.node;
process.stdout.write(JSON.stringify(out) + '\n');
