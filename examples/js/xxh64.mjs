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

// Results of the 64-bit helpers (module scratch: no allocation).
let RH = 0, RL = 0;

// mul sets RH:RL = (ah:al * bh:bl) mod 2^64.
function mul(ah, al, bh, bl) {
  // High 32 bits of al*bl (Hacker's Delight mulhu, 16-bit limbs).
  const a0 = al & 0xffff, a1 = al >>> 16, b0 = bl & 0xffff, b1 = bl >>> 16;
  const p00 = a0 * b0;
  const t = a1 * b0 + (p00 >>> 16);
  const w1 = (t & 0xffff) + a0 * b1;
  const hi = a1 * b1 + (t >>> 16) + (w1 >>> 16);
  RL = Math.imul(al, bl) >>> 0;
  RH = (hi + Math.imul(ah, bl) + Math.imul(al, bh)) >>> 0;
}

// add sets RH:RL = (ah:al + bh:bl) mod 2^64.
function add(ah, al, bh, bl) {
  const lo = al + bl;
  RL = lo >>> 0;
  RH = (ah + bh + (lo > 0xffffffff ? 1 : 0)) >>> 0;
}

// rotl sets RH:RL = rotate-left(h:l, r) for 0 < r < 64.
function rotl(h, l, r) {
  if (r >= 32) {
    const x = h;
    h = l;
    l = x;
    r -= 32;
  }
  if (r === 0) {
    RH = h;
    RL = l;
    return;
  }
  RH = ((h << r) | (l >>> (32 - r))) >>> 0;
  RL = ((l << r) | (h >>> (32 - r))) >>> 0;
}

// round sets RH:RL = rotl(acc + w*P2, 31) * P1.
function round(acch, accl, wh, wl) {
  mul(wh, wl, P2H, P2L);
  add(acch, accl, RH, RL);
  rotl(RH, RL, 31);
  mul(RH, RL, P1H, P1L);
}

// le32 reads 4 little-endian bytes of b at i as an unsigned 32-bit number.
function le32(b, i) {
  return (b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24)) >>> 0;
}

// xxh64Halves sets RH:RL = XXH64(b, seed sh:sl).
function xxh64Halves(b, sh, sl) {
  const n = b.length;
  let i = 0, hh, hl;
  if (n >= 32) {
    add(sh, sl, P1H, P1L);
    add(RH, RL, P2H, P2L);
    let v1h = RH, v1l = RL;
    add(sh, sl, P2H, P2L);
    let v2h = RH, v2l = RL;
    let v3h = sh, v3l = sl;
    // seed - P1 = seed + (2^64 - P1)
    add(sh, sl, ~P1H >>> 0, ~P1L >>> 0);
    add(RH, RL, 0, 1);
    let v4h = RH, v4l = RL;
    for (; i + 32 <= n; i += 32) {
      round(v1h, v1l, le32(b, i + 4), le32(b, i));
      v1h = RH; v1l = RL;
      round(v2h, v2l, le32(b, i + 12), le32(b, i + 8));
      v2h = RH; v2l = RL;
      round(v3h, v3l, le32(b, i + 20), le32(b, i + 16));
      v3h = RH; v3l = RL;
      round(v4h, v4l, le32(b, i + 28), le32(b, i + 24));
      v4h = RH; v4l = RL;
    }
    rotl(v1h, v1l, 1);
    hh = RH; hl = RL;
    rotl(v2h, v2l, 7);
    add(hh, hl, RH, RL);
    hh = RH; hl = RL;
    rotl(v3h, v3l, 12);
    add(hh, hl, RH, RL);
    hh = RH; hl = RL;
    rotl(v4h, v4l, 18);
    add(hh, hl, RH, RL);
    hh = RH; hl = RL;
    const vs = [v1h, v1l, v2h, v2l, v3h, v3l, v4h, v4l];
    for (let j = 0; j < 8; j += 2) {
      round(0, 0, vs[j], vs[j + 1]);
      mul((hh ^ RH) >>> 0, (hl ^ RL) >>> 0, P1H, P1L);
      add(RH, RL, P4H, P4L);
      hh = RH; hl = RL;
    }
  } else {
    add(sh, sl, P5H, P5L);
    hh = RH; hl = RL;
  }
  // h += n (n < 2^53: split into halves)
  add(hh, hl, Math.floor(n / 4294967296) >>> 0, n >>> 0);
  hh = RH; hl = RL;
  for (; i + 8 <= n; i += 8) {
    round(0, 0, le32(b, i + 4), le32(b, i));
    rotl((hh ^ RH) >>> 0, (hl ^ RL) >>> 0, 27);
    mul(RH, RL, P1H, P1L);
    add(RH, RL, P4H, P4L);
    hh = RH; hl = RL;
  }
  if (i + 4 <= n) {
    mul(0, le32(b, i), P1H, P1L);
    rotl((hh ^ RH) >>> 0, (hl ^ RL) >>> 0, 23);
    mul(RH, RL, P2H, P2L);
    add(RH, RL, P3H, P3L);
    hh = RH; hl = RL;
    i += 4;
  }
  for (; i < n; i++) {
    mul(0, b[i], P5H, P5L);
    rotl((hh ^ RH) >>> 0, (hl ^ RL) >>> 0, 11);
    mul(RH, RL, P1H, P1L);
    hh = RH; hl = RL;
  }
  // avalanche
  hl = (hl ^ (hh >>> 1)) >>> 0; // h ^= h >> 33
  mul(hh, hl, P2H, P2L);
  hh = RH; hl = RL;
  hl = (hl ^ ((hl >>> 29) | (hh << 3))) >>> 0; // h ^= h >> 29
  hh = (hh ^ (hh >>> 29)) >>> 0;
  mul(hh, hl, P3H, P3L);
  hh = RH; hl = RL;
  RL = (hl ^ hh) >>> 0; // h ^= h >> 32
  RH = hh;
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
  return (BigInt(RH) << 32n) | BigInt(RL);
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
  return RH.toString(16).padStart(8, '0') + RL.toString(16).padStart(8, '0');
}

/**
 * h >> 11 of h = XXH64(b, seed 0), as an exact integer below 2^53: what the
 * sticky score is made of (DESIGN §4.4).
 * @param {Uint8Array} b
 * @returns {number}
 */
export function hashTop53(b) {
  xxh64Halves(b, 0, 0);
  return RH * 2097152 + (RL >>> 11);
}
