// XXH64 with BigInt arithmetic: the straightforward form, kept only to
// measure it against xxh64.mjs's 32-bit halves (bench/bench.mjs).
const M = (1n << 64n) - 1n;
const P1 = 0x9e3779b185ebca87n, P2 = 0xc2b2ae3d27d4eb4fn, P3 = 0x165667b19e3779f9n;
const P4 = 0x85ebca77c2b2ae63n, P5 = 0x27d4eb2f165667c5n;
const rotl = (x, r) => ((x << r) | (x >> (64n - r))) & M;
const round = (acc, w) => (rotl((acc + w * P2) & M, 31n) * P1) & M;
const merge = (acc, v) => (((acc ^ round(0n, v)) * P1) + P4) & M;

function le64(b, i) {
  const lo = (b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24)) >>> 0;
  const hi = (b[i + 4] | (b[i + 5] << 8) | (b[i + 6] << 16) | (b[i + 7] << 24)) >>> 0;
  return (BigInt(hi) << 32n) | BigInt(lo);
}

/** XXH64 of b with seed 0, as a BigInt. */
export function xxh64BigInt(b) {
  const n = b.length;
  let i = 0, h;
  if (n >= 32) {
    let v1 = (P1 + P2) & M, v2 = P2, v3 = 0n, v4 = (-P1) & M;
    for (; i + 32 <= n; i += 32) {
      v1 = round(v1, le64(b, i)); v2 = round(v2, le64(b, i + 8));
      v3 = round(v3, le64(b, i + 16)); v4 = round(v4, le64(b, i + 24));
    }
    h = (rotl(v1, 1n) + rotl(v2, 7n) + rotl(v3, 12n) + rotl(v4, 18n)) & M;
    h = merge(h, v1); h = merge(h, v2); h = merge(h, v3); h = merge(h, v4);
  } else {
    h = P5;
  }
  h = (h + BigInt(n)) & M;
  for (; i + 8 <= n; i += 8) h = (rotl(h ^ round(0n, le64(b, i)), 27n) * P1 + P4) & M;
  if (i + 4 <= n) {
    const w = BigInt((b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24)) >>> 0);
    h = (rotl(h ^ ((w * P1) & M), 23n) * P2 + P3) & M;
    i += 4;
  }
  for (; i < n; i++) h = (rotl(h ^ ((BigInt(b[i]) * P5) & M), 11n) * P1) & M;
  h ^= h >> 33n; h = (h * P2) & M; h ^= h >> 29n; h = (h * P3) & M; h ^= h >> 32n;
  return h;
}

/** h >> 11 of XXH64(b), as a number. */
export function hashTop53BigInt(b) {
  return Number(xxh64BigInt(b) >> 11n);
}
