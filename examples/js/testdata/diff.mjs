// Driver of TestJSAgreesOnRandomPolicies (differential_test.go): many
// worlds in one node process, every decision through the whole path.
//
//   node diff.mjs    stdin: JSON {"headers": [hex], "modes": ["kv"|"kv-later"|"idx"|"idx-cached"], "full": N,
//                    "worlds": [{"kv": FILE, "idx": FILE, "now": ms, "later": ms, "max_age": s, "keys": [hex]}]}
//   stdout: for each world, for each mode, one JSON line per header (fleettest.SweepLine):
//   {"outcomes": [O], "ids": "…"}: ids[0] the decision without a key, ids[1 + j] with key j.
//   O as driver.mjs's. Keys are passed as strings when UTF-8, else as bytes. The decision without a key and those with the first N - 1 keys go
//   through the whole path: decideFromKV (an in-memory Workers KV holding the `regionctl
//   export kv --format cloudflare` FILE), decideFromIndexFile (one open and read of the index
//   FILE per decision) or an IndexReader's decide; the other keys through decideEntry on the
//   entry that mode read once for the header (kvEntry, readIndexFile, the reader's read). The reader's
//   clock is the world's "now" (opts.now), Go's resolve instant, so staleness and valid_until
//   are judged at the instant Go decides at, not at whenever node runs; kv-later is kv with
//   the clock at "later" (a Worker deciding from the export some time after it was made).
import { readFileSync } from 'node:fs';
import { decideEntry, decideFromIndexFile, decideFromKV, IndexReader, kvEntry, readIndexFile } from '../node.mjs';
import { hex, latin1, memoryKV, outcomeAsync as outcome } from './common.mjs';

// key is a sticky key as a front door would pass it: a string when its
// bytes are UTF-8 (hashed as its UTF-8), else the bytes.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
function key(h) {
  const b = hex(h);
  try {
    return utf8.decode(b);
  } catch {
    return b;
  }
}

const IDS = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_';
Error.stackTraceLimit = 0;

const { headers, modes, worlds, full } = JSON.parse(readFileSync(0, 'utf8'));
const hs = headers.map(latin1);
const owner = process.getuid();
const out = [];
for (const w of worlds) {
  const ks = ['', ...w.keys.map(key)];
  for (const m of modes) {
    const opts = { maxAgeSeconds: w.max_age, now: m === 'kv-later' ? w.later : w.now, owner };
    const mode = m === 'kv-later' ? 'kv' : m;
    const kv = mode === 'kv' ? memoryKV(JSON.parse(readFileSync(w.kv, 'utf8'))) : null;
    const reader = mode === 'idx-cached' ? new IndexReader(w.idx, { owner }) : null;
    for (const h of hs) {
      const list = [], seen = new Map();
      let ids = '';
      let read;
      for (const [i, k] of ks.entries()) {
        let o;
        if (i >= full) {
          if (read === undefined) {
            // A read that fails is every such decision's outcome.
            read = await outcome(() => {
              switch (mode) {
                case 'kv': return kvEntry(kv, h);
                case 'idx': return readIndexFile(w.idx, h, owner);
                case 'idx-cached': return reader.read(h);
              }
            });
          }
          o = read.ok ? await outcome(() => decideEntry(read.d.header, read.d.country, read.d.entry, k, opts)) : read;
        } else {
          switch (mode) {
            case 'kv': o = await outcome(() => decideFromKV(kv, h, k, opts)); break;
            case 'idx': o = await outcome(() => decideFromIndexFile(w.idx, h, k, opts)); break;
            case 'idx-cached': o = await outcome(() => reader.decide(h, k, opts)); break;
            default: throw new Error(`unknown mode ${mode}`);
          }
        }
        const j = JSON.stringify(o);
        let c = seen.get(j);
        if (c === undefined) {
          if (list.length === IDS.length) throw new Error('more than 64 outcomes for one header');
          list.push(o);
          c = IDS[list.length - 1];
          seen.set(j, c);
        }
        ids += c;
      }
      out.push(JSON.stringify({ outcomes: list, ids }));
    }
  }
}
process.stdout.write(out.join('\n') + '\n');
