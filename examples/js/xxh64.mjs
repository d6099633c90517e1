// xxh64 (XXH64, seed-able) over a Uint8Array, in 32-bit halves: no BigInt
// on the hot path (BigInt arithmetic allocates; see README.md "Speed").
//
//     import { xxh64, xxh64Hex, hashTop53 } from './xxh64.mjs';
//     xxh64Hex(new TextEncoder().encode('abc'))  // '44bc2cf5ad770999'
//
// No dependencies, no Node built-ins: runs on Node 20+ and in Workers.

// The five primes, as [hi, lo] 32-bit halves.
const P1H = 0x9e3779b1, P1L = 0x85ebca87;
const P2H = 0xc2b2ae3d, P2L = 0x27d4eb4f;
const P3H = 0x165667b1, P3L = 0x9e3779f9;
const P4H = 0x85ebca77, P4L = 0xc2b2ae63;
const P5H = 0x27d4eb2f, P5L = 0x165667c5;

// Results of the 64-bit helpers. A typed array, not two variables: V8
// boxes numbers above 2^30 stored in module variables (an allocation per
// operation, 16 µs a pick); typed-array elements stay unboxed.
const R = new Uint32Array(2);

// mul sets R[0]:R[1] = (ah:al * bh:bl) mod 2^64.
function mul(ah, al, bh, bl) {
  // High 32 bits of al*bl (Hacker's Delight mulhu, 16-bit limbs).
  const a0 = al & 0xffff, a1 = al >>> 16, b0 = bl & 0xffff, b1 = bl >>> 16;
  const p00 = a0 * b0;
  const t = a1 * b0 + (p00 >>> 16);
  const w1 = (t & 0xffff) + a0 * b1;
  const hi = a1 * b1 + (t >>> 16) + (w1 >>> 16);
  R[1] = Math.imul(al, bl) >>> 0;
  R[0] = (hi + Math.imul(ah, bl) + Math.imul(al, bh)) >>> 0;
}

// add sets R[0]:R[1] = (ah:al + bh:bl) mod 2^64.
function add(ah, al, bh, bl) {
  const lo = al + bl;
  R[1] = lo >>> 0;
  R[0] = (ah + bh + (lo > 0xffffffff ? 1 : 0)) >>> 0;
}

// rotl sets R[0]:R[1] = rotate-left(h:l, r) for 0 < r < 64.
function rotl(h, l, r) {
  if (r >= 32) {
    const x = h;
    h = l;
    l = x;
    r -= 32;
  }
  if (r === 0) {
    R[0] = h;
    R[1] = l;
    return;
  }
  R[0] = ((h << r) | (l >>> (32 - r))) >>> 0;
  R[1] = ((l << r) | (h >>> (32 - r))) >>> 0;
}

// round sets R[0]:R[1] = rotl(acc + w*P2, 31) * P1.
function round(acch, accl, wh, wl) {
  mul(wh, wl, P2H, P2L);
  add(acch, accl, R[0], R[1]);
  rotl(R[0], R[1], 31);
  mul(R[0], R[1], P1H, P1L);
}

// le32 reads 4 little-endian bytes of b at i as an unsigned 32-bit number.
function le32(b, i) {
  return (b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24)) >>> 0;
}

// xxh64Halves sets R[0]:R[1] = XXH64(b, seed sh:sl).
function xxh64Halves(b, sh, sl) {
  const n = b.length;
  let i = 0, hh, hl;
  if (n >= 32) {
    add(sh, sl, P1H, P1L);
    add(R[0], R[1], P2H, P2L);
    let v1h = R[0], v1l = R[1];
    add(sh, sl, P2H, P2L);
    let v2h = R[0], v2l = R[1];
    let v3h = sh, v3l = sl;
    // seed - P1 = seed + (2^64 - P1)
    add(sh, sl, ~P1H >>> 0, ~P1L >>> 0);
    add(R[0], R[1], 0, 1);
    let v4h = R[0], v4l = R[1];
    for (; i + 32 <= n; i += 32) {
      round(v1h, v1l, le32(b, i + 4), le32(b, i));
      v1h = R[0]; v1l = R[1];
      round(v2h, v2l, le32(b, i + 12), le32(b, i + 8));
      v2h = R[0]; v2l = R[1];
      round(v3h, v3l, le32(b, i + 20), le32(b, i + 16));
      v3h = R[0]; v3l = R[1];
      round(v4h, v4l, le32(b, i + 28), le32(b, i + 24));
      v4h = R[0]; v4l = R[1];
    }
    rotl(v1h, v1l, 1);
    hh = R[0]; hl = R[1];
    rotl(v2h, v2l, 7);
    add(hh, hl, R[0], R[1]);
    hh = R[0]; hl = R[1];
    rotl(v3h, v3l, 12);
    add(hh, hl, R[0], R[1]);
    hh = R[0]; hl = R[1];
    rotl(v4h, v4l, 18);
    add(hh, hl, R[0], R[1]);
    hh = R[0]; hl = R[1];
    const vs = [v1h, v1l, v2h, v2l, v3h, v3l, v4h, v4l];
    for (let j = 0; j < 8; j += 2) {
      round(0, 0, vs[j], vs[j + 1]);
      mul((hh ^ R[0]) >>> 0, (hl ^ R[1]) >>> 0, P1H, P1L);
      add(R[0], R[1], P4H, P4L);
      hh = R[0]; hl = R[1];
    }
  } else {
    add(sh, sl, P5H, P5L);
    hh = R[0]; hl = R[1];
  }
  // h += n (n < 2^53: split into halves)
  add(hh, hl, Math.floor(n / 4294967296) >>> 0, n >>> 0);
  hh = R[0]; hl = R[1];
  for (; i + 8 <= n; i += 8) {
    round(0, 0, le32(b, i + 4), le32(b, i));
    rotl((hh ^ R[0]) >>> 0, (hl ^ R[1]) >>> 0, 27);
    mul(R[0], R[1], P1H, P1L);
    add(R[0], R[1], P4H, P4L);
    hh = R[0]; hl = R[1];
  }
  if (i + 4 <= n) {
    mul(0, le32(b, i), P1H, P1L);
    rotl((hh ^ R[0]) >>> 0, (hl ^ R[1]) >>> 0, 23);
    mul(R[0], R[1], P2H, P2L);
    add(R[0], R[1], P3H, P3L);
    hh = R[0]; hl = R[1];
    i += 4;
  }
  for (; i < n; i++) {
    mul(0, b[i], P5H, P5L);
    rotl((hh ^ R[0]) >>> 0, (hl ^ R[1]) >>> 0, 11);
    mul(R[0], R[1], P1H, P1L);
    hh = R[0]; hl = R[1];
  }
  // avalanche
  hl = (hl ^ (hh >>> 1)) >>> 0; // h ^= h >> 33
  mul(hh, hl, P2H, P2L);
  hh = R[0]; hl = R[1];
  hl = (hl ^ ((hl >>> 29) | (hh << 3))) >>> 0; // h ^= h >> 29
  hh = (hh ^ (hh >>> 29)) >>> 0;
  mul(hh, hl, P3H, P3L);
  hh = R[0]; hl = R[1];
  R[1] = (hl ^ hh) >>> 0; // h ^= h >> 32
  R[0] = hh;
}

function seedHalves(seed) {
  if (seed === undefined || seed === 0 || seed === 0n) return [0, 0];
  const s = BigInt.asUintN(64, BigInt(seed));
  return [Number(s >> 32n), Number(s & 0xffffffffn)];
}

/**
 * XXH64 of the bytes b with seed (a number or BigInt; default 0), as a
 * BigInt in [0, 2^64).
 * @param {Uint8Array} b
 * @param {number|bigint} [seed]
 * @returns {bigint}
 */
export function xxh64(b, seed = 0) {
  const [sh, sl] = seedHalves(seed);
  xxh64Halves(b, sh, sl);
  return (BigInt(R[0]) << 32n) | BigInt(R[1]);
}

/**
 * XXH64 of b as 16 lower-case hex digits (the form of PHP's hash('xxh64')).
 * @param {Uint8Array} b
 * @param {number|bigint} [seed]
 * @returns {string}
 */
export function xxh64Hex(b, seed = 0) {
  const [sh, sl] = seedHalves(seed);
  xxh64Halves(b, sh, sl);
  return R[0].toString(16).padStart(8, '0') + R[1].toString(16).padStart(8, '0');
}

/**
 * h >> 11 of h = XXH64(b, seed 0), as an exact integer below 2^53: what the
 * sticky score is made of (docs/resolution.md).
 * @param {Uint8Array} b
 * @returns {number}
 */
export function hashTop53(b) {
  xxh64Halves(b, 0, 0);
  return R[0] * 2097152 + (R[1] >>> 11);
}
