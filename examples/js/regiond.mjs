// regiond reader for JavaScript front doors and edge workers (Node 20+,
// Cloudflare Workers; no dependencies, no Node built-ins).
//
// It decides exactly as the agent's /v1/resolve does (docs/resolution.md), from one
// self-contained per-country entry: either a slot of the agent's snapshot
// index (table.idx, format 1; on Node see node.mjs) or a per-country KV
// value made by `regionctl export kv` (in a Worker).
//
//     import { decideFromKV } from './regiond.mjs';
//     const d = await decideFromKV(env.REGIOND, request.headers.get('CF-IPCountry'), viewerId);
//
// A decision is {country, route, pool, host, attrs, revision, epoch,
// fallback_depth, degraded}; no eligible pool throws NoRouteError (its
// toJSON() is the agent's 503 body); a malformed or unknown-version index
// or value throws TableError.

import { hashTop53 } from './xxh64.mjs';

/** The pseudo-country of every empty, invalid or unassigned header. */
export const UNKNOWN = '_unknown';

/** Index and KV value format versions this reader knows. */
export const FORMATS = Object.freeze([1]);

/**
 * Default max age of synced_at, in seconds (as the PHP reader): older, and
 * every decision carries `stale-table`.
 */
export const DEFAULT_MAX_AGE = 180;

/** Number of slots of an index: AA..ZZ, then _unknown. */
export const SLOTS = 677;

const MAGIC = [0x52, 0x47, 0x49, 0x58]; // "RGIX"
const SLOT_SIZE = 12;
const TWO_POW_53 = 9007199254740992;
const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

/** The index or KV value is missing, malformed or of an unknown version. */
export class TableError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'TableError';
  }
}

/**
 * No eligible pool for the viewer (the agent's 503 NoRoute); reasons say
 * why (`pool-down:eu-central`, `residency-blocked:us-east`, …).
 */
export class NoRouteError extends Error {
  constructor(country, reasons, revision, epoch) {
    super(`regiond: no eligible pool for ${country} (${reasons.length ? reasons.join(', ') : 'no reason given'})`);
    this.name = 'NoRouteError';
    this.country = country;
    this.reasons = reasons;
    this.revision = revision;
    this.epoch = epoch;
  }

  /** The agent's 503 body (members the agent leaves out when empty are left out; epoch is always there, 0 too). */
  toJSON() {
    const b = { error: 'no eligible pool', code: 'no_route' };
    if (this.country) b.country = this.country;
    if (this.reasons.length) b.reasons = this.reasons;
    if (this.revision) b.revision = this.revision;
    b.epoch = this.epoch;
    return b;
  }
}

function isSpace(c) {
  return c === 32 || c === 9 || c === 13 || c === 10;
}

/**
 * The ISO 3166-1 alpha-2 codes officially assigned (249), in alphabetical
 * order: Go's routing.Countries() (TestCountriesMatchGo checks they are
 * equal). A KV export has one key for each, and one for _unknown.
 */
export const COUNTRIES = Object.freeze(('AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ ' +
  'BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV BW BY BZ ' +
  'CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ ' +
  'DE DJ DK DM DO DZ ' +
  'EC EE EG EH ER ES ET ' +
  'FI FJ FK FM FO FR ' +
  'GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY ' +
  'HK HM HN HR HT HU ' +
  'ID IE IL IM IN IO IQ IR IS IT ' +
  'JE JM JO JP ' +
  'KE KG KH KI KM KN KP KR KW KY KZ ' +
  'LA LB LC LI LK LR LS LT LU LV LY ' +
  'MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ ' +
  'NA NC NE NF NG NI NL NO NP NR NU NZ ' +
  'OM ' +
  'PA PE PF PG PH PK PL PM PN PR PS PT PW PY ' +
  'QA ' +
  'RE RO RS RU RW ' +
  'SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ ' +
  'TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ ' +
  'UA UG UM US UY UZ ' +
  'VA VC VE VG VI VN VU ' +
  'WF WS ' +
  'YE YT ' +
  'ZA ZM ZW').split(' '));

// assigned[slot] is 1 for the slot of an assigned code.
const assigned = new Uint8Array(SLOTS);
for (const c of COUNTRIES) assigned[(c.charCodeAt(0) - 65) * 26 + (c.charCodeAt(1) - 65)] = 1;

/**
 * Whether code is an assigned ISO 3166-1 alpha-2 code in upper case (Go's
 * routing.IsCountry).
 * @param {string} code
 */
export function isCountry(code) {
  if (typeof code !== 'string' || code.length !== 2 || !/^[A-Z]{2}$/.test(code)) return false;
  return assigned[(code.charCodeAt(0) - 65) * 26 + (code.charCodeAt(1) - 65)] === 1;
}

/**
 * The slot of a raw country header, as Go's routing.Resolve normalizes the
 * value Go's Header.Get gives: the text before the first comma (Node's
 * http and the Fetch API join a repeated header as "US, DE"; Go takes the
 * first one), ASCII spaces (' ', \t, \r, \n) trimmed, upper-cased; two
 * ASCII letters give 26*a+b ("AA" = 0 … "ZZ" = 675), anything else 676
 * (_unknown). Whether the code is an assigned country is the index's (or
 * KV's) to say.
 * @param {string|null|undefined} raw
 * @returns {number}
 */
export function countrySlot(raw) {
  if (typeof raw !== 'string') return SLOTS - 1;
  let i = 0, j = raw.indexOf(',');
  if (j < 0) j = raw.length;
  while (i < j && isSpace(raw.charCodeAt(i))) i++;
  while (j > i && isSpace(raw.charCodeAt(j - 1))) j--;
  if (j - i !== 2) return SLOTS - 1;
  const a = raw.charCodeAt(i) & ~32, b = raw.charCodeAt(i + 1) & ~32; // ASCII upper case
  const la = raw.charCodeAt(i) | 32, lb = raw.charCodeAt(i + 1) | 32;
  if (la < 97 || la > 122 || lb < 97 || lb > 122) return SLOTS - 1;
  return (a - 65) * 26 + (b - 65);
}

/**
 * The two-letter code of a slot ("AA".."ZZ"), or _unknown for slot 676.
 * @param {number} slot
 */
export function slotCode(slot) {
  if (slot >= SLOTS - 1) return UNKNOWN;
  return String.fromCharCode(65 + Math.floor(slot / 26), 65 + (slot % 26));
}

/**
 * The KV key of a raw country header, as Go's routing.NormalizeCountry
 * (after countrySlot): an assigned code, or _unknown for anything else
 * (empty, invalid, reserved or unassigned: "XX", "EU", "T1").
 * @param {string|null|undefined} raw
 */
export function countryKey(raw) {
  const slot = countrySlot(raw);
  return assigned[slot] === 1 ? slotCode(slot) : UNKNOWN;
}

// DAYS_IN_MONTH is each month's length in a common year.
const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

// MS_400Y is the length of 400 years of the Gregorian calendar, in ms.
const MS_400Y = 146097 * 86400000;

/**
 * Milliseconds since the epoch of an RFC 3339 time (Go's RFC3339Nano), or
 * NaN; "" and absent are NaN (never). Also NaN for a month, day, hour,
 * minute or second out of range ("2026-02-31", "25:00", "10:00:60") or an
 * offset past Go's (hour 24, minute 60), which Go's time.Parse refuses, so
 * that the reader refuses the files the Go reader refuses (Date.UTC would
 * roll them over into another instant); and for a lower-case "t" or "z",
 * which Go refuses too. Like Go it reads an hour of one digit ("T8:00:00Z")
 * and a comma before the fraction ("00,5Z").
 */
export function parseTime(s) {
  if (typeof s !== 'string') return NaN;
  // As Go's time.Parse reads RFC3339Nano: upper-case T and Z only, and
  // also an hour of one digit and a comma before the fraction.
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d+))?(Z|([+-])(\d{2}):(\d{2}))$/.exec(s);
  if (!m) return NaN;
  const y = +m[1], mo = +m[2], d = +m[3], hh = +m[4], mm = +m[5], ss = +m[6];
  const leap = mo === 2 && y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
  if (mo < 1 || mo > 12 || d < 1 || d > DAYS_IN_MONTH[mo - 1] + (leap ? 1 : 0) || hh > 23 || mm > 59 || ss > 59) return NaN;
  if (m[9] && (+m[10] > 24 || +m[11] > 60)) return NaN;
  // Date.UTC takes years 0 to 99 for 1900 to 1999: 400 years on, the same
  // day of the week and leap years, and back.
  let t = Date.UTC(y + 400, mo - 1, d, hh, mm, ss) - MS_400Y;
  if (m[7]) t += Number('0.' + m[7]) * 1000;
  if (m[9]) t += (m[9] === '+' ? -1 : 1) * (+m[10] * 60 + +m[11]) * 60000;
  return t;
}

// hasTime is whether a header's optional time member is there: absent,
// null and "" are none.
const hasTime = (v) => v !== undefined && v !== null && v !== '';

// checkHeader validates the members of an index header or KV value that a
// reader uses, naming where it came from.
function checkHeader(h, where) {
  if (h === null || typeof h !== 'object' || Array.isArray(h)) throw new TableError(`regiond: ${where}: header is not a JSON object`);
  if (h.format !== undefined && !FORMATS.includes(h.format)) {
    throw new TableError(`regiond: ${where}: format ${JSON.stringify(h.format)}, this reader knows format ${FORMATS.join(', ')}`);
  }
  for (const k of ['revision', 'epoch']) {
    if (!Number.isSafeInteger(h[k])) throw new TableError(`regiond: ${where}: ${k} is not an integer`);
  }
  if (h.stale !== undefined && typeof h.stale !== 'boolean') throw new TableError(`regiond: ${where}: stale is not a boolean`);
  const badTime = (k) => new TableError(`regiond: ${where}: ${k} ${JSON.stringify(h[k])} is not an RFC 3339 time`);
  // written_at is every header's: the Go reader refuses one without it
  // (absent, null or "").
  if (h.written_at === undefined) throw new TableError(`regiond: ${where}: no written_at`);
  if (Number.isNaN(parseTime(h.written_at))) throw badTime('written_at');
  // synced_at absent, null or "" is none (an older agent's file: isStale
  // counts from written_at), as the Go reader takes it.
  if (hasTime(h.synced_at) && Number.isNaN(parseTime(h.synced_at))) throw badTime('synced_at');
  // valid_until absent, null or "" is none, as synced_at's.
  if (hasTime(h.valid_until) && Number.isNaN(parseTime(h.valid_until))) throw badTime('valid_until');
}

/**
 * Whether a table header says stale: marked stale by the agent, past its
 * valid_until (a KV export's), or synced_at (written_at when synced_at is
 * absent, null or empty, as the PHP and Go readers do) older than maxAgeSeconds;
 * a header with neither is stale.
 */
export function isStale(h, { maxAgeSeconds = DEFAULT_MAX_AGE, now = Date.now() } = {}) {
  // A max age that is not a positive number ("15m" through Number(), NaN)
  // would compare false and switch staleness off: refuse it.
  if (typeof maxAgeSeconds !== 'number' || !(maxAgeSeconds > 0) || !Number.isFinite(maxAgeSeconds)) {
    throw new RangeError(`regiond: maxAgeSeconds ${String(maxAgeSeconds)}: want a positive number of seconds (e.g. 900)`);
  }
  if (h.stale === true) return true;
  // A KV export's values change by the clock alone at valid_until (a
  // boost's expiry, a health grace window's end), and nothing rewrites them.
  if (hasTime(h.valid_until) && !(now < parseTime(h.valid_until))) return true;
  let t = parseTime(h.synced_at);
  if (Number.isNaN(t)) t = parseTime(h.written_at);
  return Number.isNaN(t) || now - t > maxAgeSeconds * 1000;
}

// checkEntry validates an entry, naming where it came from.
function checkEntry(e, where) {
  const bad = (what) => new TableError(`regiond: ${where}: entry ${what}`);
  if (e === null || typeof e !== 'object' || Array.isArray(e)) throw bad('is not a JSON object');
  if (typeof e.route !== 'string') throw bad('has no route string');
  if (!Number.isSafeInteger(e.fallback_depth)) throw bad('has no integer fallback_depth');
  if (e.affinity !== undefined && e.affinity !== null && typeof e.affinity !== 'string') throw bad('affinity is not a string');
  if (e.degraded === undefined || e.degraded === null) e.degraded = [];
  if (!Array.isArray(e.degraded) || !e.degraded.every((r) => typeof r === 'string')) throw bad('degraded is not a list of strings');
  if (e.candidates === null || e.candidates === undefined) e.candidates = [];
  if (!Array.isArray(e.candidates)) throw bad('candidates is not a list');
  for (const [i, c] of e.candidates.entries()) {
    if (c === null || typeof c !== 'object' || typeof c.pool !== 'string' || typeof c.host !== 'string' || !Number.isSafeInteger(c.weight)) {
      throw bad(`candidate ${i} has no pool, host and integer weight`);
    }
    if (c.attrs === undefined || c.attrs === null) c.attrs = {};
    if (typeof c.attrs !== 'object' || Array.isArray(c.attrs)) throw bad(`candidate ${i} attrs is not an object`);
  }
  return e;
}

/**
 * Compares two strings by their UTF-8 bytes, as Go compares strings.
 * @returns {number} <0, 0 or >0
 */
function compareBytes(a, b) {
  if (a === b) return 0;
  const x = utf8.encode(a), y = utf8.encode(b);
  const n = Math.min(x.length, y.length);
  for (let i = 0; i < n; i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

// scratch holds key + "\x00" + pool for the sticky hash, grown as needed.
let scratch = new Uint8Array(256);

function reserve(keep, n) {
  if (n > scratch.length) {
    const g = new Uint8Array(Math.max(n, 2 * scratch.length));
    g.set(scratch.subarray(0, keep));
    scratch = g;
  }
}

// putString writes s as UTF-8 into scratch at off and returns the end
// (plain ASCII without TextEncoder: it costs more than the hash).
function putString(s, off) {
  reserve(off, off + 3 * s.length);
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 128) return off + utf8.encodeInto(s.slice(i), scratch.subarray(off)).written;
    scratch[off++] = c;
  }
  return off;
}

// putKey writes a sticky key (a string is taken as UTF-8) and the "\x00"
// separator at the start of scratch and returns the end.
function putKey(key) {
  let n;
  if (typeof key === 'string') {
    n = putString(key, 0);
  } else {
    reserve(0, key.length + 1);
    scratch.set(key, 0);
    n = key.length;
  }
  reserve(n, n + 1);
  scratch[n] = 0;
  return n + 1;
}

// unitAt is u = ((h >> 11) + 0.5) / 2^53 of the sticky hash of the key in
// scratch[0:k] and pool.
function unitAt(k, pool) {
  const n = putString(pool, k);
  return (hashTop53(scratch.subarray(0, n)) + 0.5) / TWO_POW_53;
}

/**
 * The rendezvous score of pool for key with weight w (docs/resolution.md, the sticky pick):
 * h = xxh64(key + "\x00" + pool, seed 0), u = ((h >> 11) + 0.5) / 2^53,
 * score = -ln(u) / w. Lower wins.
 * @param {string|Uint8Array} key
 * @param {string} pool
 * @param {number} w
 */
export function stickyScore(key, pool, w) {
  return -Math.log(unitAt(putKey(key), pool)) / w;
}

/**
 * The index of the candidate Go's routing.PickSticky picks for key: the
 * lowest stickyScore, ties to the smaller pool id (bytes); weight ≤ 0 never
 * picked unless all are (then 0).
 * @param {{pool: string, weight: number}[]} cands
 * @param {string|Uint8Array} key
 */
export function pickSticky(cands, key) {
  const k = putKey(key);
  let best = -1, bestScore = 0;
  for (let i = 0; i < cands.length; i++) {
    const c = cands[i];
    if (c.weight <= 0) continue;
    const s = -Math.log(unitAt(k, c.pool)) / c.weight;
    if (best < 0 || s < bestScore || (s === bestScore && compareBytes(c.pool, cands[best].pool) < 0)) {
      best = i;
      bestScore = s;
    }
  }
  return best < 0 ? 0 : best;
}

/**
 * Weighted random pick (Go's pick without a sticky key); random() in [0, 1).
 */
export function pickRandom(cands, random = Math.random) {
  let total = 0;
  for (const c of cands) total += Math.max(c.weight, 0);
  if (total <= 0) return 0;
  let r = Math.floor(random() * total);
  for (let i = 0; i < cands.length; i++) {
    r -= Math.max(cands[i].weight, 0);
    if (r < 0) return i;
  }
  return cands.length - 1;
}

/**
 * The decision for one entry of a table (header: revision, epoch, stale,
 * synced_at). Throws NoRouteError when the entry has no candidate.
 * @param {object} header
 * @param {string} country the normalized country (a code or _unknown)
 * @param {object} entry a checked entry
 * @param {string|Uint8Array|null|undefined} key the sticky key ("" or null: none)
 * @param {{maxAgeSeconds?: number, now?: number, random?: () => number}} [opts]
 */
export function decideEntry(header, country, entry, key, opts = {}) {
  // A number (or any other type) would have no length and be picked at
  // random: the same viewer would move between pools.
  if (key !== null && key !== undefined && typeof key !== 'string' && !(key instanceof Uint8Array)) {
    throw new TypeError(`regiond: sticky key of type ${typeof key}: want a string, a Uint8Array, or null`);
  }
  let degraded = entry.degraded;
  if (isStale(header, opts) && !degraded.includes('stale-table')) degraded = [...degraded, 'stale-table'];
  const cands = entry.candidates;
  if (cands.length === 0) throw new NoRouteError(country, degraded, header.revision, header.epoch);
  let i = 0;
  if (cands.length > 1) {
    const sticky = key !== null && key !== undefined && key.length > 0 && entry.affinity !== 'random';
    i = sticky ? pickSticky(cands, key) : pickRandom(cands, opts.random);
  }
  const c = cands[i];
  return {
    country,
    route: entry.route,
    pool: c.pool,
    host: c.host,
    attrs: c.attrs,
    revision: header.revision,
    epoch: header.epoch,
    fallback_depth: entry.fallback_depth,
    degraded,
  };
}

// ---- the snapshot index (table.idx, format 1) ----

function u16(b, i) {
  return b[i] | (b[i + 1] << 8);
}

function u32(b, i) {
  return (b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24)) >>> 0;
}

// text decodes UTF-8 bytes; plain ASCII (entries usually are) without
// TextDecoder, which costs more than the JSON.parse of a short entry.
function text(bytes) {
  if (bytes.length <= 4096) {
    let ascii = true;
    for (let i = 0; i < bytes.length; i++) {
      if (bytes[i] >= 128) {
        ascii = false;
        break;
      }
    }
    if (ascii) return String.fromCharCode.apply(null, bytes);
  }
  return utf8Decoder.decode(bytes);
}

function parseJSON(input, where, what) {
  let s = input;
  if (typeof s !== 'string') {
    try {
      s = text(input);
    } catch {
      throw new TableError(`regiond: ${where}: ${what} is not UTF-8`);
    }
  }
  try {
    return JSON.parse(s);
  } catch (err) {
    throw new TableError(`regiond: ${where}: ${what} is not JSON: ${err.message}`);
  }
}

/** How many bytes the first read of an index should ask for. */
export const INDEX_PREFIX_READ = 512;

/**
 * The steps of reading one country's entry from an index, as a generator:
 * it yields [offset, length] reads and is sent back the bytes read there
 * (fewer at the end of the file); it returns {header, country, entry}
 * (country: the code, or _unknown per the slot's kind). Drive it with
 * readIndexEntry (sync) or readIndexEntryAsync; every read must come from
 * one open file, so that header and entry are of one table.
 */
export function* indexSteps(name, country) {
  const slot = countrySlot(country);
  const head = yield [0, INDEX_PREFIX_READ];
  if (head.length < 8) throw new TableError(`regiond: ${name}: ${head.length} bytes: not a regiond index (too short)`);
  if (MAGIC.some((m, i) => head[i] !== m)) throw new TableError(`regiond: ${name}: not a regiond index (no RGIX magic)`);
  const version = u16(head, 4);
  if (!FORMATS.includes(version)) {
    throw new TableError(`regiond: ${name}: index format version ${version}, this reader knows version ${FORMATS.join(', ')}`);
  }
  const hlen = u16(head, 6);
  let hb = head.subarray(8, 8 + hlen);
  if (hb.length < hlen) hb = yield [8, hlen];
  if (hb.length < hlen) throw new TableError(`regiond: ${name}: truncated header (${hb.length} of ${hlen} bytes)`);
  const header = parseJSON(hb, name, 'header');
  checkHeader(header, name);
  // format and slots are required, as the Go and PHP readers require them
  // (the JS reader took a header without either).
  if (header.format === undefined) throw new TableError(`regiond: ${name}: header has no format member`);
  if (header.slots === undefined) throw new TableError(`regiond: ${name}: header has no slots member`);
  if (header.slots !== SLOTS) {
    throw new TableError(`regiond: ${name}: header says ${JSON.stringify(header.slots)} slots, format 1 has ${SLOTS}`);
  }
  const at = 8 + hlen + SLOT_SIZE * slot;
  let sb = head.subarray(at, at + SLOT_SIZE);
  if (sb.length < SLOT_SIZE) sb = yield [at, SLOT_SIZE];
  if (sb.length < SLOT_SIZE) throw new TableError(`regiond: ${name}: truncated slot table (slot ${slot})`);
  const off = u32(sb, 0), len = u32(sb, 4), kind = u32(sb, 8);
  if (kind > 1) throw new TableError(`regiond: ${name}: slot ${slot} has unknown kind ${kind}`);
  const tableEnd = 8 + hlen + SLOT_SIZE * SLOTS;
  if (off < tableEnd || len === 0) throw new TableError(`regiond: ${name}: slot ${slot} points at ${off}+${len}, outside the entries`);
  const eb = off + len <= head.length ? head.subarray(off, off + len) : yield [off, len];
  if (eb.length < len) throw new TableError(`regiond: ${name}: slot ${slot}: entry at ${off}+${len} is past the end of the file`);
  const where = `${name} slot ${slot}`;
  const entry = checkEntry(parseJSON(eb, where, 'entry'), where);
  return { header, country: kind === 0 ? slotCode(slot) : UNKNOWN, entry };
}

/**
 * The {header, country, entry} of a raw country header from an index read
 * with readAt(offset, length) → Uint8Array (fewer bytes at the end of the
 * file); name names the index in errors.
 * @param {(offset: number, length: number) => Uint8Array} readAt
 */
export function readIndexEntry(readAt, name, country) {
  const g = indexSteps(name, country);
  let r = g.next();
  while (!r.done) r = g.next(readAt(r.value[0], r.value[1]));
  return r.value;
}

/** readIndexEntry with an async readAt. */
export async function readIndexEntryAsync(readAt, name, country) {
  const g = indexSteps(name, country);
  let r = g.next();
  while (!r.done) r = g.next(await readAt(r.value[0], r.value[1]));
  return r.value;
}

/**
 * The decision for a raw country header and sticky key from an index read
 * with readAt (see readIndexEntry).
 */
export function decideFromIndex(readAt, name, country, key, opts) {
  const { header, country: cc, entry } = readIndexEntry(readAt, name, country);
  return decideEntry(header, cc, entry, key, opts);
}

/** decideFromIndex with an async readAt. */
export async function decideFromIndexAsync(readAt, name, country, key, opts) {
  const { header, country: cc, entry } = await readIndexEntryAsync(readAt, name, country);
  return decideEntry(header, cc, entry, key, opts);
}

/**
 * decideFromIndex on the whole index in memory (e.g. fetched, or read with
 * one readFile).
 * @param {Uint8Array} buf
 */
export function decideFromIndexBytes(buf, name, country, key, opts) {
  return decideFromIndex((off, len) => buf.subarray(off, off + len), name, country, key, opts);
}

// ---- per-country KV values (regionctl export kv) ----

/**
 * The {header, country, entry} of one KV value of `regionctl export kv` (a
 * JSON string, or the value already parsed); name names it in errors.
 */
export function valueEntry(value, name = 'KV value') {
  const v = typeof value === 'string' ? parseJSON(value, name, 'value') : value;
  checkHeader(v, name);
  if (v.format === undefined) throw new TableError(`regiond: ${name}: no format member: not a regiond KV value`);
  if (typeof v.country !== 'string' || (v.country !== UNKNOWN && !/^[A-Z]{2}$/.test(v.country))) {
    throw new TableError(`regiond: ${name}: country ${JSON.stringify(v.country)} is not a code or ${UNKNOWN}`);
  }
  return { header: v, country: v.country, entry: checkEntry(v.entry, name) };
}

/** The decision from one KV value (see valueEntry) for sticky key key. */
export function decideFromValue(value, key, opts = {}, name = 'KV value') {
  const { header, country, entry } = valueEntry(value, name);
  return decideEntry(header, country, entry, key, opts);
}

// upload says how to put the whole export into a namespace.
const upload = 'upload the whole of regionctl export kv --format cloudflare (wrangler kv bulk put FILE --binding NAME --remote: without --remote, Wrangler 4 writes to local storage)';

/**
 * The {header, country, entry} for a raw country header from a KV
 * namespace holding the export (a Workers KV binding: get(key, {type:
 * 'json'}) → value or null): the value of its key (countryKey: an
 * assigned code, or _unknown for anything else). A missing value is a
 * TableError, for an assigned code too: _unknown follows
 * unknown_country_class, which need not be the country's residency class
 * (a DE viewer sent to a US pool), so a country whose key is missing (an
 * upload cut short, a key deleted) is not routed as _unknown. A value
 * whose country is not its key's is a TableError too.
 */
export async function kvEntry(kv, country) {
  const k = countryKey(country);
  const v = await kv.get(k, { type: 'json' });
  if (v === null || v === undefined) {
    if (k === UNKNOWN) throw new TableError(`regiond: KV has no ${UNKNOWN} value: ${upload}`);
    throw new TableError(`regiond: KV has no value for ${k}, an assigned country: not routed as ${UNKNOWN}, whose residency class may not be ${k}'s; ${upload}`);
  }
  const e = valueEntry(v, `KV key ${k}`);
  if (e.country !== k) throw new TableError(`regiond: KV key ${k} holds the value of ${JSON.stringify(e.country)}: ${upload}`);
  return e;
}

/** The decision for a raw country header and sticky key from a KV namespace (see kvEntry). */
export async function decideFromKV(kv, country, key, opts = {}) {
  const { header, country: cc, entry } = await kvEntry(kv, country);
  return decideEntry(header, cc, entry, key, opts);
}
