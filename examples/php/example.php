<?php
// A front door (front controller): send the viewer to the edge regiond chose
// for them, without calling the agent. Cloudflare puts the viewer's country
// in CF-IPCountry; the sticky key keeps a viewer on one pool while the table
// is unchanged. Under php-fpm each request opens the agent's per-country
// index (table.idx beside the snapshot) and reads one entry: see
// nginx-front.conf and php-fpm-front.conf. Every answer names the table
// revision it used (X-Regiond-Revision), and none may be cached: see below.

declare(strict_types=1);

require __DIR__ . '/RegiondTable.php';
require __DIR__ . '/ThrottledLog.php';

use Regiond\NoRouteException;
use Regiond\RegiondTable;
use Regiond\TableException;
use Regiond\ThrottledLog;

// Every answer is one viewer's, for one country and one table: no CDN or
// browser may keep it. Without this a CDN caches a 302 for a cacheable path
// (Cloudflare does for .mp4, keyed without CF-IPCountry) and gives one
// viewer's edge to every viewer at that PoP, and a drain reaches viewers
// only when the cached copy expires. The agent's /v1/resolve says no-store
// too.
header('Cache-Control: private, no-store');

// The first of repeated CF-IPCountry headers, as the agent takes it:
// nginx-front.conf passes the first (nginx before 1.23), or all of them
// joined ("DE, US": nginx 1.23 and later, Apache), cut here at the comma.
$country = explode(',', (string) ($_SERVER['HTTP_CF_IPCOUNTRY'] ?? ''), 2)[0];
// Any stable per-viewer id; null = weighted random. A client can send
// "viewer[]=x", which PHP makes an array: not a key.
$viewer = is_string($_COOKIE['viewer'] ?? null) ? $_COOKIE['viewer'] : null;
// fastcgi_param REGIOND_SNAPSHOT (nginx), or the environment (CLI).
$snapshot = $_SERVER['REGIOND_SNAPSHOT'] ?? (getenv('REGIOND_SNAPSHOT') ?: RegiondTable::DEFAULT_PATH);
// fastcgi_param REGIOND_OWNER: the agent's user (a name or a uid), by
// default the package's, regiond: a snapshot of anyone else's (a local user
// who made the directory first) is refused. Name your own user for an agent
// you run yourself (regiond dev). An empty value reads a snapshot of any
// owner: unsafe where other local users could make the directory first.
$owner = $_SERVER['REGIOND_OWNER'] ?? getenv('REGIOND_OWNER');
if (!is_string($owner)) {
    $owner = RegiondTable::DEFAULT_OWNER;
}

try {
    $table = RegiondTable::load($snapshot, owner: $owner);
    $d = $table->resolve($country, $viewer);
} catch (NoRouteException $e) {
    // No eligible pool: for an EU viewer this means no EU edge is up.
    // Never improvise a non-EU edge here; answer as the agent would.
    http_response_code(503);
    header('Content-Type: application/json');
    header('Retry-After: 5');
    header('X-Regiond-Revision: ' . $e->revision);
    echo json_encode($e->toArray(), JSON_UNESCAPED_SLASHES), "\n";
    exit;
} catch (TableException $e) {
    // The table cannot be read: no snapshot (agent not running?), a
    // permission or owner refusal, an unknown owner user... The log line
    // names the cause (at most one line per message every 10 s, counting
    // the rest: a failing front door fails every request); the body claims
    // none. Fail closed; a front door may instead ask the agent's socket.
    // fastcgi_param REGIOND_LOG_EVERY: other seconds between two lines.
    ThrottledLog::error($e->getMessage(), (int) ($_SERVER['REGIOND_LOG_EVERY'] ?? ThrottledLog::EVERY));
    http_response_code(503);
    header('Content-Type: text/plain');
    echo "routing unavailable: the regiond table cannot be read\n";
    exit;
}

if ($d['degraded'] !== []) {
    header('X-Regiond-Degraded: ' . implode(',', $d['degraded']));
}
if (!$table->fromIndex()) {
    // No table.idx beside the snapshot (an agent older than the index, or
    // one whose --snapshot is elsewhere): every request reads and decodes
    // the whole table JSON, many times slower. Said, not only slow.
    ThrottledLog::error("regiond: no index beside {$snapshot} (table.idx): each request reads the whole table JSON, many times slower; "
        . "is the agent older than the index, or its --snapshot elsewhere?",
        (int) ($_SERVER['REGIOND_LOG_EVERY'] ?? ThrottledLog::EVERY));
}
if (in_array('stale-table', $d['degraded'], true)) {
    // The agent has not confirmed its table against etcd for minutes
    // (stopped, or cut off from etcd): viewers still get its decisions,
    // which no longer follow drains, boosts or health. Said in the log
    // (throttled as failures are), not only in a response header.
    ThrottledLog::error("regiond: the table in {$snapshot} is stale (marked so by its agent, or not confirmed against etcd for over "
        . RegiondTable::DEFAULT_MAX_AGE . " s): decisions follow it all the same; check the agent (systemctl status regiond, its /v1/status)",
        (int) ($_SERVER['REGIOND_LOG_EVERY'] ?? ThrottledLog::EVERY));
}
header('X-Regiond-Pool: ' . $d['pool']);
header('X-Regiond-Revision: ' . $d['revision']);
header('Content-Language: ' . ($d['attrs']['lang'] ?? 'en'));

$host = preg_replace('/:443$/', '', $d['host']);
$location = 'https://' . $host . ($_SERVER['REQUEST_URI'] ?? '/');
header('Location: ' . $location, true, 302);
echo $location, "\n";
