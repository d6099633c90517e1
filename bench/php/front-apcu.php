<?php
// The front-door bench's APCu variant (go run ./bench -phases front): the
// whole decoded snapshot JSON cached in APCu, keyed on the file's inode,
// size and mtime (what field reports describe), then the same decision as
// RegiondTable::resolve() on the JSON. An APCu fetch copies the whole array
// out of shared memory on every request. (Keyed on the mtime alone, such a
// cache serves old tables for up to a second: TestFrontDoorUnderFPM fails
// it, 1,968 of 2,000 answers behind. The inode makes each rename a new key.)

declare(strict_types=1);

require __DIR__ . '/RegiondTable.php';

use Regiond\RegiondTable;

$country = $_SERVER['HTTP_CF_IPCOUNTRY'] ?? '';
$viewer = $_COOKIE['viewer'] ?? null;
$snapshot = $_SERVER['REGIOND_SNAPSHOT'] ?? (getenv('REGIOND_SNAPSHOT') ?: RegiondTable::DEFAULT_PATH);

$t0 = hrtime(true);
$st = stat($snapshot);
$key = 'regiond:' . $snapshot . ':' . $st['ino'] . ':' . $st['size'] . ':' . $st['mtime'];
$t = apcu_fetch($key, $ok);
if (!$ok) {
    $t = json_decode(file_get_contents($snapshot), true, 512, JSON_THROW_ON_ERROR);
    apcu_store($key, $t, 600);
}

$s = strtoupper(trim($country, " \t\r\n"));
$cc = (strlen($s) === 2 && isset($t['effective'][$s])) ? $s : '_unknown';
$e = $t['effective'][$cc];
$cands = $e['candidates'];
if ($cands === []) {
    http_response_code(503);
    header('X-Regiond-Revision: ' . $t['revision']);
    echo "no route\n";
    exit;
}
$best = 0;
if ($viewer !== null && $viewer !== '' && ($e['affinity'] ?? '') !== 'random') {
    $bestScore = INF;
    foreach ($cands as $i => $c) {
        $sc = RegiondTable::stickyScore($viewer, $c['pool'], $c['weight']);
        if ($sc < $bestScore) {
            [$best, $bestScore] = [$i, $sc];
        }
    }
}
$c = $cands[$best];
$d = ['pool' => $c['pool'], 'host' => $c['host'], 'revision' => $t['revision'], 'degraded' => $e['degraded'],
    'attrs' => $e['attrs'] + ($t['pools'][$c['pool']]['attrs'] ?? [])];
header('X-Regiond-Lookup-Ns: ' . (hrtime(true) - $t0));

if ($d['degraded'] !== []) {
    header('X-Regiond-Degraded: ' . implode(',', $d['degraded']));
}
header('X-Regiond-Pool: ' . $d['pool']);
header('X-Regiond-Revision: ' . $d['revision']);
header('Content-Language: ' . ($d['attrs']['lang'] ?? 'en'));

$host = preg_replace('/:443$/', '', $d['host']);
$location = 'https://' . $host . ($_SERVER['REQUEST_URI'] ?? '/');
header('Location: ' . $location, true, 302);
echo $location, "\n";
