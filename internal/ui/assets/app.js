// regiond status page. Reads the agent's API only (same origin): the table
// with a blocking query (min_revision), so a change shows without a reload;
// /v1/status; and the page's own endpoints under ui/api/. Every value is
// set with textContent: nothing from the table is parsed as HTML.
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  // agentError: why the last request to the agent failed ('' once one
  // succeeds); it outranks what the last status said. statusAt: when the
  // status was read (its stale_seconds grows from then); fleetAt: when
  // the fleet was.
  const state = { table: null, rev: 0, sig: '', status: null, statusAt: 0, node: null, agentError: '',
    renders: 0, fleetBusy: false, fleetTimer: 0, fleetAt: 0, statusBusy: false };
  window.regiondUI = state; // for people poking at it (and the browser test)

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function row(cells, cls) {
    const tr = el('tr', null, cls);
    for (const c of cells) tr.appendChild(c instanceof Node ? c : el('td', c));
    return tr;
  }
  function fill(tbody, rows) { tbody.replaceChildren(...rows); }
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  async function getJSON(path) {
    const r = await fetch(path, { cache: 'no-store', headers: { Accept: 'application/json' } });
    let body;
    try { body = await r.json(); } catch (e) { throw new Error(path + ': HTTP ' + r.status + ', not JSON'); }
    return { status: r.status, body: body };
  }

  function fmtDur(s) {
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
    return Math.floor(s / 86400) + 'd ' + Math.floor((s % 86400) / 3600) + 'h';
  }
  // ago says how long before the agent's clock iso is: the times are the
  // agent's and its fleet's, and the browser's clock may differ from
  // theirs (state.skew, from the last /v1/status).
  function ago(iso) {
    if (!iso) return '–';
    const t = Date.parse(iso);
    return isNaN(t) ? iso : fmtDur((Date.now() + (state.skew || 0) - t) / 1000) + ' ago';
  }

  function banner(msg) {
    const b = $('banner');
    b.hidden = !msg;
    b.textContent = msg || '';
  }
  // setLive shows whether the page follows the table; label names why
  // not (the agent unreachable unless said).
  function setLive(ok, err, label) {
    const l = $('live');
    l.className = 'badge ' + (ok ? 'ok' : 'bad');
    l.textContent = ok ? 'live' : label || 'agent unreachable';
    l.title = ok ? 'following the table with a blocking query' : String(err);
  }

  // ---- this node ----------------------------------------------------------
  async function refreshStatus() {
    const [st, node] = await Promise.all([getJSON('../v1/status'), getJSON('api/node')]);
    state.status = st.body;
    state.statusAt = Date.now();
    // The agent's clock against the browser's: synced_at (its wall
    // clock) plus stale_seconds (how long ago, by it) is its now.
    const synced = Date.parse(st.body.synced_at || '');
    if (!isNaN(synced) && st.body.stale_seconds >= 0) state.skew = synced + st.body.stale_seconds * 1000 - state.statusAt;
    state.node = node.body;
    renderStatus();
  }

  // The status on its own clock too: the table's blocking query may wait
  // for seconds, and etcd lost or the agent gone must show at once.
  async function pollStatus() {
    if (state.statusBusy) return;
    state.statusBusy = true;
    try {
      await refreshStatus();
      if (state.agentError.startsWith('Cannot reach')) agentReached();
    } catch (e) {
      agentLost(e);
    } finally {
      state.statusBusy = false;
    }
  }
  function agentLost(e) {
    setLive(false, e);
    state.agentError = 'Cannot reach the agent: ' + e.message + '; retrying. The facts below are as of ' +
      (state.statusAt ? new Date(state.statusAt).toLocaleTimeString() : 'never') + '.';
    renderStatus();
  }
  function agentReached() {
    state.agentError = '';
    setLive(true);
    renderStatus();
  }

  // snapshotNotWritten says what a snapshot_error means, as regionctl
  // status does.
  function snapshotNotWritten(err) {
    return 'snapshot files not written, so the front doors reading them route by an older table: ' + err;
  }

  function renderStatus() {
    const st = state.status, node = state.node || {};
    if (!st) { banner(state.agentError); return; }
    $('node-status').classList.toggle('dated', state.agentError.startsWith('Cannot reach'));
    $('node').textContent = st.node || node.node || '';
    document.title = 'regiond ' + (st.node || '') + ' · r' + st.revision;
    $('revision').textContent = st.revision;
    $('epoch').textContent = st.epoch;
    const c = $('connected');
    c.textContent = st.connected ? 'connected' : 'disconnected';
    c.className = st.connected ? 'ok' : 'bad';
    const s = $('synced');
    s.textContent = st.synced_at ? ago(st.synced_at) : 'never';
    s.title = st.synced_at || '';
    const stale = st.stale_seconds < 0 ? -1 : st.stale_seconds + (Date.now() - state.statusAt) / 1000;
    s.className = stale < 0 || stale > 300 ? 'bad' : stale > 30 ? 'warn' : '';
    const w = $('written'), snap = node.snapshot;
    if (!snap) { w.textContent = 'no snapshot file (--snapshot "")'; w.title = ''; w.className = ''; }
    else if (snap.error) { w.textContent = 'unreadable'; w.title = snap.error; w.className = 'bad'; }
    else {
      // The file holds an older table than the one served: its write
      // failed (snapshot_error), or has yet to come.
      const behind = snap.revision < (node.table_change_revision || 0);
      w.textContent = ago(snap.written_at) + ' (r' + snap.revision + ')' +
        (behind ? ', behind the table served (r' + node.table_change_revision + ')' : '');
      w.title = snap.path + ' ' + snap.written_at;
      w.className = behind || st.snapshot_error ? 'bad' : '';
    }
    const sv = $('serving');
    sv.textContent = st.stale ? 'snapshot file, not yet synced with etcd' : 'table from etcd';
    sv.className = st.stale ? 'bad' : 'ok';
    $('version').textContent = node.version || '–';
    // Each problem on a line of its own; the agent unreachable outranks
    // what its last status said.
    banner(state.agentError || [st.etcd_error ? 'etcd: ' + st.etcd_error : '',
      st.status_error ? 'status key not published (regionctl status shows this node\'s last status, or none): ' + st.status_error : '',
      st.snapshot_error ? snapshotNotWritten(st.snapshot_error) : ''].filter(Boolean).join('\n'));
    const sk = st.skipped || [];
    $('skipped-box').hidden = sk.length === 0;
    $('skipped-count').textContent = sk.length;
    fill($('skipped').tBodies[0], sk.map((k) => row([k.key, k.error])));
  }

  // ---- countries ------------------------------------------------------------
  function targets(e) {
    return (e.candidates || []).map((c) => c.pool + '=' + c.weight).join(', ');
  }
  // shares says what part of the viewers each candidate gets: the weights
  // left after drains and health need not add up to 100.
  function shares(e) {
    const cs = e.candidates || [];
    const sum = cs.reduce((n, c) => n + c.weight, 0);
    if (sum === 100 || sum === 0) return '';
    return cs.map((c) => c.pool + ' ' + Math.round((100 * c.weight) / sum) + '%').join(', ');
  }
  function hosts(e) {
    return [...new Set((e.candidates || []).map((c) => c.host))].join(', ');
  }
  function countryCodes(eff) {
    return Object.keys(eff).sort((a, b) => (a === '_unknown') - (b === '_unknown') || a.localeCompare(b));
  }
  function countryRow(cc, e, extraCls) {
    const noRoute = !e.candidates || e.candidates.length === 0;
    const deg = e.degraded || [];
    const cls = [noRoute ? 'noroute' : deg.length ? 'degraded' : '', extraCls || ''].join(' ').trim();
    const pools = el('td', noRoute ? 'none eligible' : targets(e));
    const sh = noRoute ? '' : shares(e);
    if (sh) pools.appendChild(el('span', ' (' + sh + ' of viewers)', 'share'));
    const tr = row([el('td', cc === '_unknown' ? 'unknown country' : cc, 'cc'), e.route || '–',
      el('td', noRoute ? '–' : e.fallback_depth, 'num'), pools, hosts(e),
      el('td', deg.join(', '), 'reasons')], cls);
    tr.dataset.cc = cc;
    tr.dataset.search = [cc, e.route, targets(e), hosts(e), deg.join(' '), noRoute ? 'noroute no route' : ''].join(' ').toLowerCase();
    tr.dataset.problem = noRoute || deg.length ? '1' : '';
    return tr;
  }

  function renderTable() {
    const t = state.table;
    const eff = t.effective || {};
    const codes = countryCodes(eff);
    const rows = codes.map((cc) => countryRow(cc, eff[cc]));
    fill($('countries').tBodies[0], rows);
    const noRoute = codes.filter((cc) => !eff[cc].candidates || eff[cc].candidates.length === 0);
    const nr = $('noroute-count');
    nr.hidden = noRoute.length === 0;
    nr.textContent = noRoute.length + ' with no route: ' + noRoute.join(' ');
    applyFilter();
    renderPools();
    renderMap();
    state.renders++;
    document.body.dataset.revision = String(t.revision);
  }

  function applyFilter() {
    const terms = $('filter').value.toLowerCase().split(/\s+/).filter(Boolean);
    const only = $('only-problems').checked;
    let shown = 0, total = 0;
    for (const tr of $('countries').tBodies[0].rows) {
      total++;
      const ok = terms.every((w) => tr.dataset.search.includes(w)) && (!only || tr.dataset.problem);
      tr.hidden = !ok;
      if (ok) shown++;
    }
    $('country-count').textContent = shown === total ? total : shown + ' of ' + total;
  }

  // ---- map ------------------------------------------------------------------
  // world/world-110m.json is a TopoJSON topology (world/NOTICE): arcs of
  // delta-encoded quantized points, and countries as rings of arc indices
  // (~i: arc i reversed), ids ISO 3166-1 alpha-2. Drawn equirectangular.
  // The palette's colours are told apart from each other and from the
  // no-route red and the no-entry grey: CIELAB ΔE ≥ 25 for every pair
  // (TestPaletteColorsDiffer).
  const palette = ['#4e79a7', '#f28e2b', '#59a14f', '#e377c2', '#654522', '#dcd300',
    '#17becf', '#ff9da7', '#c2b280', '#604e97', '#b3446c', '#8db600'];
  const noRouteColor = '#c62828', noEntryColor = '#d9dde3';
  // colors: the colour each pool was given, kept for the page's life.
  const map = { paths: {}, ready: false, colors: new Map() };

  function decodeArcs(topo) {
    const [sx, sy] = topo.transform.scale, [tx, ty] = topo.transform.translate;
    return topo.arcs.map((arc) => {
      let x = 0, y = 0;
      return arc.map(([dx, dy]) => { x += dx; y += dy; return [x * sx + tx, y * sy + ty]; });
    });
  }
  function ringPath(arcs, ring) {
    const pts = [];
    for (const i of ring) {
      const a = i < 0 ? arcs[~i].slice().reverse() : arcs[i];
      pts.push(...(pts.length ? a.slice(1) : a));
    }
    // A ring that crosses the antimeridian (Fiji, Chukotka) is cut there
    // rather than drawn across the whole map.
    let d = '';
    pts.forEach(([x, y], i) => {
      d += (i === 0 || Math.abs(x - pts[i - 1][0]) > 180 ? 'M' : 'L') + x.toFixed(2) + ',' + (-y).toFixed(2);
    });
    return d + 'Z';
  }
  function geometryPath(arcs, g) {
    const polys = g.type === 'Polygon' ? [g.arcs] : g.type === 'MultiPolygon' ? g.arcs : [];
    return polys.map((rings) => rings.map((r) => ringPath(arcs, r)).join('')).join('');
  }

  async function loadMap() {
    const r = await fetch('world/world-110m.json');
    if (!r.ok) return; // a build without the map: the table says it all
    const topo = await r.json();
    const svg = $('map'), NS = svg.namespaceURI;
    const arcs = decodeArcs(topo);
    for (const g of topo.objects.countries.geometries) {
      const p = document.createElementNS(NS, 'path');
      p.setAttribute('d', geometryPath(arcs, g));
      p.setAttribute('fill', noEntryColor);
      if (g.id) {
        p.dataset.cc = g.id;
        p.appendChild(document.createElementNS(NS, 'title'));
        p.addEventListener('click', () => { $('filter').value = g.id; applyFilter(); });
        (map.paths[g.id] = map.paths[g.id] || []).push(p);
      }
      svg.appendChild(p);
    }
    map.ready = true;
    $('map-box').hidden = false;
    if (state.table) renderMap();
  }

  // servingPool is the candidate with the highest weight (the first of equals).
  function servingPool(e) {
    let best = null;
    for (const c of e.candidates || []) if (!best || c.weight > best.weight) best = c;
    return best && best.pool;
  }

  // assignColors gives each serving pool without one a colour of its own,
  // the palette's first free one, and keeps it: a pool added, drained or
  // removed recolours no other country. With every colour held, one held by
  // a pool that serves nowhere now is taken back; past that, pools share a
  // colour (each country's title names its pool).
  function assignColors(serving) {
    const held = () => new Set(map.colors.values());
    for (const pool of [...serving].sort()) {
      if (map.colors.has(pool)) continue;
      let c = palette.find((x) => !held().has(x));
      if (!c) {
        const idle = [...map.colors.keys()].find((p) => !serving.has(p));
        if (idle !== undefined) { c = map.colors.get(idle); map.colors.delete(idle); }
      }
      map.colors.set(pool, c || palette[map.colors.size % palette.length]);
    }
  }

  function renderMap() {
    if (!map.ready) return;
    const eff = state.table.effective || {};
    const serving = new Set();
    for (const cc of Object.keys(map.paths)) {
      const pool = eff[cc] && servingPool(eff[cc]);
      if (pool) serving.add(pool);
    }
    assignColors(serving);
    const used = new Map();
    for (const cc of Object.keys(map.paths).sort()) {
      const e = eff[cc], pool = e && servingPool(e);
      const fill = !e ? noEntryColor : pool ? map.colors.get(pool) : noRouteColor;
      for (const p of map.paths[cc]) {
        p.setAttribute('fill', fill);
        p.dataset.pool = pool || '';
        p.classList.toggle('noroute', !!e && !pool);
        p.firstChild.textContent = cc + ': ' + (!e ? 'no entry' : pool ? targets(e) : 'NO ROUTE');
      }
      if (pool) used.set(pool, fill);
      else if (e) used.set('no route', noRouteColor);
    }
    $('map-legend').replaceChildren(...[...used].sort((a, b) => a[0].localeCompare(b[0])).map(([name, c]) => {
      const item = el('span', null, 'legend-item');
      const sw = el('span', null, 'swatch');
      sw.style.background = c;
      item.dataset.pool = name;
      item.dataset.color = c;
      item.append(sw, name);
      return item;
    }));
  }

  // ---- boosts ---------------------------------------------------------------
  async function refreshBoosts() {
    const r = await getJSON('api/boosts');
    const bs = (r.body && r.body.boosts) || [];
    const now = Date.now();
    $('boosts-count').textContent = bs.length;
    $('boosts-note').textContent = bs.length === 0 ? 'No live boosts.' : (r.body.error || '');
    fill($('boosts').tBodies[0], bs.map((b) => {
      const left = el('td', '', 'num left');
      if (b.ttl_seconds !== undefined) left.dataset.expires = String(now + b.ttl_seconds * 1000);
      else left.textContent = 'unknown';
      const tip = [];
      if (b.expires_at) tip.push('until ' + b.expires_at);
      if (b.granted_ttl_seconds) tip.push('lease ' + b.lease + ' of ' + fmtDur(b.granted_ttl_seconds));
      if (tip.length) left.title = tip.join(', ');
      // A boost of attrs alone keeps the route's targets; one of targets
      // alone, its attrs (as regionctl boost ls shows them).
      return row([b.id, b.route, (b.targets || []).map((t) => t.pool + '=' + t.weight).join(', ') || '–',
        el('td', attrList(b.attrs) || '–', 'attrs'), b.reason || '', b.author || '', left]);
    }));
    tick();
  }

  // attrList is "k=v, k2=v2", sorted by key; '' for none.
  function attrList(attrs) {
    return Object.keys(attrs || {}).sort().map((k) => k + '=' + attrs[k]).join(', ');
  }

  // tick moves the clocks: boosts' time left and the ages.
  function tick() {
    for (const td of document.querySelectorAll('td.left[data-expires]')) {
      const s = (Number(td.dataset.expires) - Date.now()) / 1000;
      td.textContent = s > 0 ? fmtDur(s) : 'expiring';
    }
    renderStatus();
  }

  // ---- fleet ----------------------------------------------------------------
  // skippedCell is an agent's skipped keys as regionctl status counts
  // them, "3 (2 served alike)": bad when some are not served alike (the
  // agent is not converged), a warning when all are; the keys named in
  // its status in the title.
  function skippedCell(a) {
    const n = a.skipped || 0, alike = a.skipped_alike || 0;
    const td = el('td', n + (alike ? ' (' + alike + ' served alike)' : ''), 'num' + (n > alike ? ' bad' : n ? ' warn' : ''));
    if (a.skipped_keys && a.skipped_keys.length) {
      td.title = a.skipped_keys.join(', ') + (n > a.skipped_keys.length ? ' and ' + (n - a.skipped_keys.length) + ' more' : '');
    }
    return td;
  }

  async function refreshFleet() {
    if (state.fleetBusy) return;
    state.fleetBusy = true;
    try {
      const r = await getJSON('api/fleet');
      const f = r.body || {};
      const table = $('fleet');
      if (f.error && !f.denied && !f.agents) {
        // etcd unread (an outage): the rows are kept, greyed as of the
        // last read, as when the agent is gone.
        $('fleet-section').classList.add('dated');
        $('fleet-note').className = 'note bad';
        $('fleet-note').textContent = f.error + '; the rows below are as of ' +
          (state.fleetAt ? new Date(state.fleetAt).toLocaleTimeString() : 'never') + '.';
        return;
      }
      $('fleet-section').classList.remove('dated');
      state.fleetAt = Date.now();
      if (f.error) {
        $('fleet-note').textContent = f.denied ? 'This agent may not read the fleet: ' + f.error : f.error;
        $('fleet-note').className = f.denied ? 'note' : 'note bad';
        table.hidden = !!f.denied;
        if (f.denied) return;
      }
      const agents = f.agents || [];
      const lost = f.lost || [];
      if (!f.error) {
        $('fleet-note').className = lost.length ? 'note bad' : 'note';
        $('fleet-note').textContent = 'Newest routing change at revision ' + f.routing_revision + ', epoch ' + f.epoch + '; read at revision ' + f.revision + '.' +
          (lost.length ? ' ' + lost.length + ' lost: status key gone with no clean stop (cut off from etcd, crashed or gone); each as its node record last said; regionctl agent rm NODE forgets one taken out of the fleet.' : '') +
          agents.filter((a) => a.snapshot_error).map((a) => ' ' + a.node + ': not converged: ' + snapshotNotWritten(a.snapshot_error) + '.').join('');
        if (agents.some((a) => a.snapshot_error)) $('fleet-note').className = 'note bad';
      }
      table.hidden = false;
      $('fleet-count').textContent = agents.length;
      const me = state.status && state.status.node;
      fill(table.tBodies[0], agents.map((a) => {
        // Not converged at lag 0 too: of another history, or its
        // snapshot files not written (the front doors read those).
        const lag = el('td', a.invalid ? 'invalid' : a.diverged ? 'diverged' : a.snapshot_error ? a.lag + ', not converged' : a.lag,
          'num ' + (a.lag > 0 || a.invalid || a.diverged || a.snapshot_error ? 'bad' : 'ok'));
        if (a.invalid || a.diverged) lag.title = a.invalid || ('another history than etcd\'s: ' + a.diverged);
        else if (a.snapshot_error) lag.title = snapshotNotWritten(a.snapshot_error);
        return row([el('td', a.node + (a.node === me ? ' (this node)' : '')), el('td', a.revision, 'num'), lag,
          el('td', a.epoch, 'num'), el('td', a.connected ? 'yes' : 'no', a.connected ? 'ok' : 'bad'),
          ago(a.synced_at), skippedCell(a), a.version || '']);
      }).concat(lost.map((a) => row([el('td', a.node), el('td', a.revision, 'num'), el('td', a.lag, 'num' + (a.lag > 0 ? ' bad' : '')),
        el('td', a.epoch, 'num'), el('td', 'LOST', 'bad'), ago(a.synced_at), skippedCell(a), a.version || '']))));
    } catch (e) {
      // The agent gone: the rows are greyed as of the last answer, as
      // the node's facts are.
      $('fleet-section').classList.add('dated');
      $('fleet-note').className = 'note bad';
      $('fleet-note').textContent = 'fleet: ' + e.message + '; the rows below are as of ' +
        (state.fleetAt ? new Date(state.fleetAt).toLocaleTimeString() : 'never') + '.';
    } finally {
      state.fleetBusy = false;
    }
  }

  // ---- pools ----------------------------------------------------------------
  async function refreshPools() {
    const r = await getJSON('api/pools');
    if (r.status !== 200) return; // no table yet: the banner says why
    const ps = r.body.pools || [];
    const out = ps.filter((p) => p.status !== 'active').length, sick = ps.filter((p) => !p.healthy).length;
    const c = $('pools-count');
    c.textContent = ps.length + (out ? ', ' + out + ' not active' : '') + (sick ? ', ' + sick + ' unhealthy' : '');
    c.className = 'count' + (out || sick ? ' bad' : '');
    fill($('pools').tBodies[0], ps.map((p) => {
      const tr = row([el('td', p.id), el('td', p.status, p.status === 'active' ? '' : 'bad'),
        el('td', p.healthy ? 'yes' : 'no', p.healthy ? 'ok' : 'bad'),
        el('td', p.health_check ? p.instances + ' live' : '– (no health_check)', 'num' + (p.health_check && !p.instances ? ' bad' : '')),
        p.residency, p.region || '–', p.host]);
      tr.dataset.pool = p.id;
      return tr;
    }));
  }

  // ---- what if --------------------------------------------------------------
  // Past this many pools, the picker shows the pools the filter finds
  // (and those checked), not a checkbox for each (2,000 buried the page).
  const pickerMax = 40;
  function renderPools() {
    const box = $('whatif-pools');
    const pools = Object.keys(state.table.pools || {}).sort();
    const labels = pools.map((id) => {
      const p = state.table.pools[id];
      return ' ' + id + (p.status !== 'active' ? ' (' + p.status + ')' : '') + (p.healthy === false ? ' (unhealthy)' : '');
    });
    // Unchanged: keep the nodes, so a table update does not swap a
    // checkbox from under a click (or the keyboard's focus).
    const key = JSON.stringify([pools, labels]);
    if (box.dataset.key === key) return;
    box.dataset.key = key;
    const checked = new Set([...box.querySelectorAll('input:checked')].map((i) => i.value));
    box.replaceChildren(...pools.map((id, i) => {
      const label = el('label');
      const cb = el('input');
      cb.type = 'checkbox';
      cb.value = id;
      cb.checked = checked.has(id);
      label.append(cb, labels[i]);
      label.dataset.search = (id + labels[i]).toLowerCase();
      return label;
    }));
    filterPools();
  }

  // filterPools shows the pools the what-if filter finds, and those
  // checked; with no filter, every pool of a small table, only the
  // checked ones of a large one.
  function filterPools() {
    const terms = $('whatif-filter').value.toLowerCase().split(/\s+/).filter(Boolean);
    const labels = [...$('whatif-pools').children];
    let shown = 0, found = 0;
    for (const l of labels) {
      const cb = l.firstChild;
      const match = terms.length ? terms.every((w) => l.dataset.search.includes(w)) : labels.length <= pickerMax;
      if (match) found++;
      const show = cb.checked || (match && found <= pickerMax);
      l.hidden = !show;
      if (show) shown++;
    }
    const note = $('whatif-pools-note');
    note.textContent = labels.length <= pickerMax && !terms.length ? '' : !terms.length
      ? labels.length + ' pools: type part of an id, a status or "unhealthy" to find them (checked ones stay shown)'
      : found > pickerMax ? found + ' pools match; the first ' + pickerMax + ' shown: type more' : found + ' of ' + labels.length + ' pools match';
  }

  async function runWhatIf() {
    const down = [...$('whatif-pools').querySelectorAll('input:checked')].map((i) => i.value);
    const out = $('whatif-result');
    if (down.length === 0) { out.replaceChildren(el('p', 'Choose at least one pool.', 'note')); return; }
    const r = await getJSON('api/whatif?down=' + encodeURIComponent(down.join(',')));
    if (r.status !== 200) { out.replaceChildren(el('p', r.body.error, 'bad')); return; }
    const w = r.body, cur = state.table.effective || {};
    const summary = el('p', null, 'whatif-summary');
    summary.textContent = 'With ' + w.down.join(', ') + ' down (table r' + w.revision + '): ' + w.changed.length +
      ' countr' + (w.changed.length === 1 ? 'y changes' : 'ies change') + ', ' + w.no_route.length + ' with no route.';
    if (w.no_route.length) summary.classList.add('bad');
    const t = el('table', null, 'whatif');
    const head = el('thead');
    head.appendChild(row(['Country', 'Now', 'Then', 'Then: route', 'Then: degraded'].map((h) => el('th', h))));
    const body = el('tbody');
    // The countries left with no route first; long lists folded.
    // The unknown country last of its group, as in the Countries table.
    const order = w.changed.slice().sort((a, b) => (w.no_route.includes(b) - w.no_route.includes(a)) ||
      (a === '_unknown') - (b === '_unknown') || a.localeCompare(b));
    const fold = 25;
    for (const [i, cc] of order.entries()) {
      const then = w.effective[cc];
      const noRoute = !then.candidates || then.candidates.length === 0;
      const tr = row([el('td', cc === '_unknown' ? 'unknown country' : cc, 'cc'), cur[cc] ? targets(cur[cc]) : '',
        noRoute ? 'NO ROUTE' : targets(then), then.route, (then.degraded || []).join(', ')], noRoute ? 'noroute' : 'changed');
      tr.dataset.cc = cc;
      tr.hidden = i >= fold;
      body.appendChild(tr);
    }
    t.append(head, body);
    const more = [];
    if (order.length > fold) {
      const b = el('button', 'Show all ' + order.length);
      b.type = 'button';
      b.addEventListener('click', () => { for (const tr of body.rows) tr.hidden = false; b.remove(); });
      more.push(b);
    }
    out.replaceChildren(summary, ...(w.changed.length ? [t] : []), ...more);
  }

  // ---- the loop ---------------------------------------------------------------
  async function follow() {
    let delay = 0;
    for (;;) {
      if (delay) await sleep(delay);
      try {
        // A short wait: a boost's expires_at and a health grace window's
        // end change the table without a new revision, which the query
        // does not wait for; the content tells.
        const q = state.table ? '?min_revision=' + (state.rev + 1) + '&wait=5s' : '';
        const t = await getJSON('../v1/table' + q);
        if (t.status !== 200) {
          await refreshStatus().catch(() => {});
          state.agentError = (t.body && t.body.error) || 'table: HTTP ' + t.status;
          setLive(false, state.agentError, 'no table');
          renderStatus();
          delay = 2000;
          continue;
        }
        const b = t.body;
        const sig = JSON.stringify([b.revision, b.epoch, b.stale, b.effective, b.pools, b.overrides || null, b.skipped]);
        const changed = sig !== state.sig;
        state.table = b;
        state.rev = b.revision;
        state.agentError = '';
        await refreshStatus();
        if (!state.fleetTimer) { // the fleet marks this node: after the first status
          refreshFleet();
          state.fleetTimer = setInterval(refreshFleet, 5000);
        }
        if (changed) {
          renderTable();
          await refreshBoosts();
          await refreshPools();
          refreshFleet(); // the agents' answers to the change
        }
        state.sig = sig; // drawn: a failure before this draws it again next time
        setLive(true);
        delay = 250; // during a burst of changes, at most ~4 renders a second
      } catch (e) {
        agentLost(e);
        delay = 2000;
      }
    }
  }

  $('filter').addEventListener('input', applyFilter);
  $('only-problems').addEventListener('change', applyFilter);
  $('whatif-filter').addEventListener('input', filterPools);
  $('whatif-run').addEventListener('click', () => runWhatIf().catch((e) => {
    $('whatif-result').replaceChildren(el('p', 'what-if: ' + e.message, 'bad'));
  }));
  setInterval(tick, 1000);
  setInterval(pollStatus, 2500);
  loadMap().catch((e) => console.warn('map: ' + e.message));
  follow();
})();
