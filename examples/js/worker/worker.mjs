// A minimal Cloudflare Worker in front of the origin: it routes every
// request by CF-IPCountry from the KV values of `regionctl export kv`
// (binding REGIOND), and is the residency floor: a viewer with no eligible
// pool (e.g. an EU viewer while every EU pool is down) gets a 503, never a
// pool outside their class.
import { decideFromKV, NoRouteError, TableError } from '../regiond.mjs';

const utf8 = new TextEncoder();

/** The value of hex digit c (a char code), or -1. */
function hexDigit(c) {
  if (c >= 48 && c <= 57) return c - 48;
  c |= 32; // lower case
  return c >= 97 && c <= 102 ? c - 87 : -1;
}

// Cloudflare's runtime (workerd) decodes header values as UTF-8; the
// Fetch standard, and Node, give one character per byte (Latin-1).
const headersAreUTF8 = globalThis.navigator?.userAgent === 'Cloudflare-Workers';

/**
 * The bytes of a header value as the runtime gave it: UTF-8 encoded where
 * it decoded them as UTF-8 (bytes that are no UTF-8 are lost there: they
 * arrive as U+FFFD), else one byte per character.
 */
function headerBytes(s, utf8Decoded) {
  if (utf8Decoded) return utf8.encode(s);
  const b = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c > 0xff) return utf8.encode(s); // not Latin-1 after all
    b[i] = c;
  }
  return b;
}

/**
 * The bytes of a cookie value as PHP's $_COOKIE gives them (its raw URL
 * decoding of the header's bytes): each %XX one byte, anything else as it
 * is ('+' and a malformed escape too). The viewer then keeps one pool
 * whichever front door, this one or PHP, sees it; decodeURIComponent
 * differs for bytes that are no UTF-8 (%FF) and malformed escapes (%zz):
 * it throws.
 *
 * @param {string} raw the cookie's value as the header holds it
 * @param {boolean} [utf8Decoded] whether the runtime decoded the header as
 *   UTF-8 (default: on Cloudflare's runtime)
 * @returns {Uint8Array}
 */
export function cookieBytes(raw, utf8Decoded = headersAreUTF8) {
  const b = headerBytes(raw, utf8Decoded);
  const out = new Uint8Array(b.length);
  let n = 0;
  for (let i = 0; i < b.length; i++) {
    if (b[i] === 37 && i + 2 < b.length) { // '%'
      const hi = hexDigit(b[i + 1]);
      const lo = hexDigit(b[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out[n++] = hi * 16 + lo;
        i += 2;
        continue;
      }
    }
    out[n++] = b[i];
  }
  return out.subarray(0, n);
}

/** The max age of the values when REGIOND_MAX_AGE is unset, in seconds. */
export const DEFAULT_MAX_AGE = 900;

/**
 * The max age in seconds of REGIOND_MAX_AGE (a string from [vars], or a
 * number), unset meaning DEFAULT_MAX_AGE: {seconds} or, for anything but
 * a positive number of seconds ("15m", "", "0"), {error}. The library
 * would throw a RangeError for it on every request (an uncaught exception:
 * Cloudflare's error 1101), not staleness switched off.
 */
export function maxAgeOf(raw) {
  if (raw === undefined || raw === null) return { seconds: DEFAULT_MAX_AGE };
  const n = typeof raw === 'number' ? raw : typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : NaN;
  if (!(n > 0) || !Number.isFinite(n)) {
    return { error: `regiond worker: REGIOND_MAX_AGE ${JSON.stringify(raw)} is not a positive number of seconds (e.g. 900, not "15m"): every request is answered 503 until it is fixed` };
  }
  return { seconds: n };
}

// maxAge is maxAgeOf(raw) for the last raw seen: checked once, not per request.
let maxAge = { raw: undefined, of: maxAgeOf(undefined) };

export default {
  async fetch(request, env) {
    if (maxAge.raw !== env.REGIOND_MAX_AGE) maxAge = { raw: env.REGIOND_MAX_AGE, of: maxAgeOf(env.REGIOND_MAX_AGE) };
    if (maxAge.of.error) { // a misconfigured worker routes no one: say why in the log
      console.error(maxAge.of.error);
      return new Response('routing misconfigured\n', { status: 503, headers: { 'Retry-After': '5' } });
    }
    // The viewer cookie's bytes, as PHP's $_COOKIE gives them.
    const raw = request.headers.get('Cookie')?.match(/(?:^|;\s*)viewer=([^;]+)/)?.[1] ?? '';
    const viewer = raw === '' ? '' : cookieBytes(raw);
    let d;
    try {
      // CF-IPCountry repeated reads as "US, DE": the first is taken, as Go does.
      d = await decideFromKV(env.REGIOND, request.headers.get('CF-IPCountry'), viewer, {
        maxAgeSeconds: maxAge.of.seconds,
      });
    } catch (err) {
      if (err instanceof NoRouteError) {
        return Response.json(err.toJSON(), { status: 503, headers: { 'Retry-After': '5' } });
      }
      if (err instanceof TableError) { // the export is missing, incomplete or malformed: say why in the log
        console.error(err.message);
        return new Response('no routing table\n', { status: 503, headers: { 'Retry-After': '5' } });
      }
      throw err;
    }
    const url = new URL(request.url);
    url.host = d.host.replace(/:443$/, '');
    const upstream = new Request(url, request);
    upstream.headers.set('X-Regiond-Pool', d.pool);
    upstream.headers.set('X-Regiond-Revision', String(d.revision));
    if (d.degraded.length) upstream.headers.set('X-Regiond-Degraded', d.degraded.join(','));
    return fetch(upstream);
  },
};
