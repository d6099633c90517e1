// Test driver of the JS reader, run by the Go tests (reader_test.go).
//
//   node driver.mjs xxh               stdin: JSON [{"hex": data, "seed": "decimal"}]; stdout: JSON [hex hash]
//   node driver.mjs score             stdin: JSON [{"key": hex, "pool": s, "weight": n}]; stdout: JSON [score]
//   node driver.mjs decide kv|idx|idx-async FILE MAXAGE
//       stdin: JSON {"headers": [hex], "keys": [hex], "full": N}
//       stdout: one JSON line per header: {"nokey": D, "full": [D × N], "picks": [candidate index × rest]}
//       where D is {"ok": true, "d": decision} or {"ok": false, "error": name, "body": toJSON(), "message"}.
//       kv reads FILE as `regionctl export kv --format cloudflare` output into an in-memory KV with
//       the Workers get(key, {type}) shape; idx reads the index file FILE per decision.
import { readFileSync } from 'node:fs';
import { xxh64Hex } from '../xxh64.mjs';
import {
  decideFromIndexFile, decideFromIndexFileAsync, decideFromKV, kvEntry, pickSticky, readIndexFile, stickyScore,
} from '../node.mjs';

const hex = (s) => Uint8Array.from(Buffer.from(s, 'hex'));
const latin1 = (s) => Buffer.from(s, 'hex').toString('latin1'); // headers: one char per byte, as Node's http gives them
const input = () => JSON.parse(readFileSync(0, 'utf8'));

function outcome(f) {
  try {
    return { ok: true, d: f() };
  } catch (err) {
    if (err.name === 'NoRouteError') return { ok: false, error: err.name, body: err.toJSON(), message: err.message };
    return { ok: false, error: err.name, message: err.message };
  }
}

async function outcomeAsync(f) {
  try {
    return { ok: true, d: await f() };
  } catch (err) {
    if (err.name === 'NoRouteError') return { ok: false, error: err.name, body: err.toJSON(), message: err.message };
    return { ok: false, error: err.name, message: err.message };
  }
}

// memoryKV is a Workers KV namespace in memory: values stored as strings,
// parsed on every get, as KV does.
function memoryKV(pairs) {
  const m = new Map(pairs.map(({ key, value }) => [key, value]));
  return {
    async get(key, opts) {
      const v = m.get(key);
      if (v === undefined) return null;
      const type = typeof opts === 'string' ? opts : opts?.type ?? 'text';
      return type === 'json' ? JSON.parse(v) : v;
    },
  };
}

async function decide(mode, file, maxAge) {
  const opts = { maxAgeSeconds: Number(maxAge) };
  const { headers, keys, full } = input();
  const kv = mode === 'kv' ? memoryKV(JSON.parse(readFileSync(file, 'utf8'))) : null;
  const one = async (h, key) => {
    switch (mode) {
      case 'kv': return outcomeAsync(() => decideFromKV(kv, h, key, opts));
      case 'idx': return outcome(() => decideFromIndexFile(file, h, key, opts));
      case 'idx-async': return outcomeAsync(() => decideFromIndexFileAsync(file, h, key, opts));
    }
    throw new Error(`unknown mode ${mode}`);
  };
  const ks = keys.map(hex);
  const lines = [];
  for (const hh of headers) {
    const h = latin1(hh);
    const line = { nokey: await one(h, ''), full: [] };
    for (let j = 0; j < full; j++) line.full.push(await one(h, ks[j]));
    // The rest of the keys: the sticky pick on the entry read once.
    const { entry } = mode === 'kv' ? await kvEntry(kv, h) : readIndexFile(file, h);
    line.picks = entry.candidates.length < 2 ? [] : ks.slice(full).map((k) => pickSticky(entry.candidates, k));
    lines.push(JSON.stringify(line));
  }
  process.stdout.write(lines.join('\n') + '\n');
}

const [mode, ...args] = process.argv.slice(2);
switch (mode) {
  case 'xxh':
    process.stdout.write(JSON.stringify(input().map(({ hex: h, seed }) => xxh64Hex(hex(h), BigInt(seed)))));
    break;
  case 'score':
    process.stdout.write(JSON.stringify(input().map(({ key, pool, weight }) => stickyScore(hex(key), pool, weight))));
    break;
  case 'decide':
    await decide(...args);
    break;
  default:
    process.stderr.write(`driver.mjs: unknown mode ${mode}\n`);
    process.exit(2);
}
