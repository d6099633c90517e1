<?php
// The front-door bench's baseline (go run ./bench -phases front): example.php
// without the routing lookup. It loads the same reader class and answers
// the same way (headers, redirect), with a fixed decision.

declare(strict_types=1);

require __DIR__ . '/RegiondTable.php';

$country = $_SERVER['HTTP_CF_IPCOUNTRY'] ?? '';
$viewer = $_COOKIE['viewer'] ?? null;
$snapshot = $_SERVER['REGIOND_SNAPSHOT'] ?? (getenv('REGIOND_SNAPSHOT') ?: \Regiond\RegiondTable::DEFAULT_PATH);

$d = ['country' => 'PL', 'route' => 'PL', 'pool' => 'eu-central', 'host' => 'edge-fra-1.example.net:443',
    'attrs' => ['lang' => 'pl'], 'revision' => 0, 'epoch' => 0, 'fallback_depth' => 0, 'degraded' => []];

header('X-Regiond-Lookup-Ns: 0'); // as the timed copy of example.php sends its lookup's time

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
