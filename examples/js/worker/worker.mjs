// A minimal Cloudflare Worker in front of the origin: it routes every
// request by CF-IPCountry from the KV values of `regionctl export kv`
// (binding REGIOND), and is the residency floor: a viewer with no eligible
// pool (e.g. an EU viewer while every EU pool is down) gets a 503, never a
// pool outside their class.
import { decideFromKV, NoRouteError } from '../regiond.mjs';

export default {
  async fetch(request, env) {
    // The viewer cookie, percent-decoded as PHP's $_COOKIE does, so a
    // viewer keeps one pool whichever front door (this one or PHP) sees it.
    const raw = request.headers.get('Cookie')?.match(/(?:^|;\s*)viewer=([^;]+)/)?.[1] ?? '';
    let viewer = raw;
    try {
      viewer = decodeURIComponent(raw);
    } catch {
      // not valid percent-encoding: the raw value is still a stable key
    }
    let d;
    try {
      d = await decideFromKV(env.REGIOND, request.headers.get('CF-IPCountry'), viewer, {
        maxAgeSeconds: Number(env.REGIOND_MAX_AGE ?? 900),
      });
    } catch (err) {
      if (err instanceof NoRouteError) {
        return Response.json(err.toJSON(), { status: 503, headers: { 'Retry-After': '5' } });
      }
      throw err; // TableError: the export is missing or malformed
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
