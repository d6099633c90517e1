// Test driver of the JS reader, run by the Go tests (reader_test.go; sweep through
// fleettest.SweepJS, also by examples/php's TestGoPHPJSAgree).
//
//   node driver.mjs xxh               stdin: JSON [{"hex": data, "seed": "decimal"}]; stdout: JSON [hex hash]
//   node driver.mjs score             stdin: JSON [{"key": hex, "pool": s, "weight": n}]; stdout: JSON [score]
//   node driver.mjs owner FILE [OWNER] stdout: JSON [O sync, O async, O IndexReader] of PL without a key,
//                                     opts.owner = OWNER (a uid when all digits, else a name; "" reads any
//                                     owner's), absent: none given (the readers' default, 'regiond')
//   node driver.mjs cookie            stdin: JSON [hex of a cookie value's bytes]; stdout: JSON [[hex of the worker's key
//                                     bytes given the value as Latin-1, and given it UTF-8 decoded as workerd does]]
//   node driver.mjs sweep kv|idx|idx-async|idx-cached FILE MAXAGE
//       stdin: JSON {"headers": [hex], "keys": [hex], "full": N}
//       stdout: one JSON line per header: {"outcomes": [O], "ids": "…"} (fleettest.SweepLine): the
//       header's distinct outcomes and, one character per decision, the index of its outcome in
//       fleettest.IDChars: ids[0] without a key, ids[1 + j] with key j. The decision without a
//       key and those with the first N keys go through the whole path (decideFromKV,
//       decideFromIndexFile, decideFromIndexFileAsync, one IndexReader's decide: a KV get or an
//       index read each, or the reader's stat and, once per slot, its read); the other
//       keys through decideEntry on the header and entry that mode read once for the header.
//       The index modes name this process's uid as opts.owner (the test's files are its own).
//       O is {"ok": true, "d": decision}, {"ok": false, "error": "NoRouteError", "noroute":
//       {country, reasons, revision, epoch}, "body": toJSON(), "message"} or {"ok": false, "error",
//       "message"}. kv reads FILE as `regionctl export kv --format cloudflare` output into an
//       in-memory KV with the Workers get(key, {type}) shape; idx and idx-async read the index FILE.
import { readFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { xxh64Hex } from '../xxh64.mjs';
import {
  decideEntry, decideFromIndexFile, decideFromIndexFileAsync, decideFromKV, IndexReader, kvEntry, readIndexEntryAsync,
  readIndexFile, stickyScore, TableError,
} from '../node.mjs';
import { failed, hex, latin1, memoryKV, outcome, outcomeAsync } from './common.mjs';

const input = () => JSON.parse(readFileSync(0, 'utf8'));

// readIndexFileAsync is readIndexFile through node:fs/promises, as
// decideFromIndexFileAsync reads (one FileHandle per call).
async function readIndexFileAsync(path, country) {
  let fh;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    throw new TableError(`regiond: open index ${path}: ${err.message}`, { cause: err });
  }
  try {
    return await readIndexEntryAsync(async (off, len) => {
      const b = Buffer.allocUnsafe(len);
      const { bytesRead } = await fh.read(b, 0, len, off);
      return b.subarray(0, bytesRead);
    }, path, country);
  } finally {
    await fh.close();
  }
}

// sameDecision reports whether two decisions have the same members and
// values (attrs compared by identity: one object per candidate of an entry
// read once).
function sameDecision(a, b) {
  if (a.country !== b.country || a.route !== b.route || a.pool !== b.pool || a.host !== b.host || a.attrs !== b.attrs ||
      a.revision !== b.revision || a.epoch !== b.epoch || a.fallback_depth !== b.fallback_depth ||
      !Array.isArray(b.degraded) || a.degraded.length !== b.degraded.length) return false;
  for (let i = 0; i < a.degraded.length; i++) if (a.degraded[i] !== b.degraded[i]) return false;
  let n = 0, m = 0;
  for (const _ in a) n++;
  for (const _ in b) m++;
  return n === m;
}

// IDS are the characters of outcome indices 0..63 (fleettest.IDChars).
const IDS = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_';

// Outcomes is one header's distinct outcomes, found without a
// JSON.stringify per decision: decisions by their attrs object, then
// member by member; errors, and decisions whose attrs are a fresh object
// (the whole path parses the entry per call), by their JSON.
class Outcomes {
  list = [];
  byAttrs = new Map();
  byJSON = new Map();
  noRoutes = new Map();

  push(o) {
    if (this.list.length === IDS.length) throw new Error(`more than ${IDS.length} distinct outcomes for one header`);
    this.list.push(o);
    return IDS[this.list.length - 1];
  }

  json(o) {
    const k = JSON.stringify(o);
    let c = this.byJSON.get(k);
    if (c === undefined) this.byJSON.set(k, (c = this.push(o)));
    return c;
  }

  // id is the ID character of o, compared by JSON.
  id(o) {
    return this.json(o);
  }

  // idFast is the ID character of the outcome of f, a decision of an entry
  // read once; NoRouteErrors are compared by their fields.
  idFast(f) {
    let d;
    try {
      d = f();
    } catch (err) {
      if (err.name !== 'NoRouteError') return this.json(failed(err));
      const k = `${err.country}\0${err.reasons.join('\x01')}\0${err.revision}\0${err.epoch}\0${err.message}`;
      let c = this.noRoutes.get(k);
      if (c === undefined) this.noRoutes.set(k, (c = this.json(failed(err))));
      return c;
    }
    const o = { ok: true, d };
    if (typeof d.attrs !== 'object' || d.attrs === null || !Array.isArray(d.degraded)) return this.json(o);
    let cs = this.byAttrs.get(d.attrs);
    if (cs === undefined) this.byAttrs.set(d.attrs, (cs = []));
    for (const [c, rep] of cs) if (sameDecision(rep, d)) return c;
    const c = this.json(o);
    cs.push([c, d]);
    return c;
  }
}

async function sweep(mode, file, maxAge) {
  const owner = process.getuid();
  const opts = { maxAgeSeconds: Number(maxAge), owner };
  const { headers, keys, full } = input();
  const kv = mode === 'kv' ? memoryKV(JSON.parse(readFileSync(file, 'utf8'))) : null;
  const reader = mode === 'idx-cached' ? new IndexReader(file, { owner }) : null;
  const whole = async (h, key) => {
    switch (mode) {
      case 'kv': return outcomeAsync(() => decideFromKV(kv, h, key, opts));
      case 'idx': return outcome(() => decideFromIndexFile(file, h, key, opts));
      case 'idx-async': return outcomeAsync(() => decideFromIndexFileAsync(file, h, key, opts));
      case 'idx-cached': return outcome(() => reader.decide(h, key, opts));
    }
    throw new Error(`unknown mode ${mode}`);
  };
  const entryOf = (h) => {
    switch (mode) {
      case 'kv': return kvEntry(kv, h);
      case 'idx': return readIndexFile(file, h, owner);
      case 'idx-async': return readIndexFileAsync(file, h);
      case 'idx-cached': return reader.read(h);
    }
    throw new Error(`unknown mode ${mode}`);
  };
  const ks = keys.map(hex);
  for (const hh of headers) {
    const h = latin1(hh);
    const os = new Outcomes();
    // The whole-path decisions of a header run concurrently, as a server's
    // requests would (one descriptor each).
    const wholes = await Promise.all(['', ...ks.slice(0, full)].map((k) => whole(h, k)));
    let ids = '';
    for (const o of wholes) ids += os.id(o);
    if (full < ks.length) {
      const { header, country, entry } = await entryOf(h);
      for (let j = full; j < ks.length; j++) ids += os.idFast(() => decideEntry(header, country, entry, ks[j], opts));
    }
    process.stdout.write(JSON.stringify({ outcomes: os.list, ids }) + '\n');
  }
}

// Stack traces are not reported: a NoRouteError per key need not capture one.
Error.stackTraceLimit = 0;

const [mode, ...args] = process.argv.slice(2);
switch (mode) {
  case 'xxh':
    process.stdout.write(JSON.stringify(input().map(({ hex: h, seed }) => xxh64Hex(hex(h), BigInt(seed)))));
    break;
  case 'score':
    process.stdout.write(JSON.stringify(input().map(({ key, pool, weight }) => stickyScore(hex(key), pool, weight))));
    break;
  case 'sweep':
    await sweep(...args);
    break;
  case 'owner': { // FILE [OWNER]: PL without a key through the three index paths, with opts.owner = OWNER
    const [file, owner] = args;
    const opts = owner === undefined ? {} : { owner: /^[0-9]+$/.test(owner) ? Number(owner) : owner };
    process.stdout.write(JSON.stringify([
      outcome(() => decideFromIndexFile(file, 'PL', '', opts)),
      await outcomeAsync(() => decideFromIndexFileAsync(file, 'PL', '', opts)),
      outcome(() => new IndexReader(file, opts).decide('PL', '')),
    ]));
    break;
  }
  case 'cookie': {
    const { cookieBytes } = await import('../worker/worker.mjs');
    // Each value as a Latin-1 runtime gives it and as workerd does (UTF-8 decoded): both keys.
    process.stdout.write(JSON.stringify(input().map((h) => [
      Buffer.from(cookieBytes(latin1(h), false)).toString('hex'),
      Buffer.from(cookieBytes(Buffer.from(h, 'hex').toString('utf8'), true)).toString('hex'),
    ])));
    break;
  }
  default:
    process.stderr.write(`driver.mjs: unknown mode ${mode}\n`);
    process.exit(2);
}
