<?php
// The front-door bench's floor (go run ./bench -phases front): the least
// any reader of the index must do per request, without RegiondTable's
// checks or errors: open table.idx, read the header, slot table and header
// block, unpack the block, read and decode the country's entry, hash each
// candidate, close. It measures what the machine charges for those calls
// in a cold php-fpm request; RegiondTable's lookup is compared with it, not
// only with the no-lookup baseline. Never a reader to deploy: it checks
// nothing. The answer after the lookup is example.php's, copied (as in the
// other variants) rather than shared, so that every variant runs the same
// code around its lookup as example.php does.

declare(strict_types=1);

require __DIR__ . '/RegiondTable.php';

$country = $_SERVER['HTTP_CF_IPCOUNTRY'] ?? '';
$viewer = ($_COOKIE['viewer'] ?? '') . "\0";
$snapshot = $_SERVER['REGIOND_SNAPSHOT'] ?? (getenv('REGIOND_SNAPSHOT') ?: \Regiond\RegiondTable::DEFAULT_PATH);

$t0 = hrtime(true);
$fh = fopen(substr($snapshot, 0, -5) . '.idx', 'rb');
stream_set_read_buffer($fh, 0);
$pre = fread($fh, 8448);
$hl = unpack('v', $pre, 6)[1];
$h = unpack('Vf/Pr/Pe/Pw/Ps', $pre, 8 + $hl + 12 * 677 + 4);
$c = strtoupper(trim($country));
$i = ((ord($c[0]) - 65) * 26) + (ord($c[1]) - 65);
['o' => $off, 'n' => $len] = unpack('Vo/Vn', $pre, 8 + $hl + 12 * $i);
fseek($fh, $off);
$e = json_decode(fread($fh, $len), true);
fclose($fh);
$best = 0;
$bestScore = INF;
foreach ($e['candidates'] as $j => $cand) {
    $x = (unpack('J', hash('xxh64', $viewer . $cand['pool'], true))[1] >> 11) & 0x1FFFFFFFFFFFFF;
    $s = -log(($x + 0.5) / 9007199254740992.0) / $cand['weight'];
    if ($s < $bestScore) {
        $bestScore = $s;
        $best = $j;
    }
}
$cand = $e['candidates'][$best];
$d = ['country' => $c, 'route' => $e['route'], 'pool' => $cand['pool'], 'host' => $cand['host'], 'attrs' => $cand['attrs'],
    'revision' => $h['r'], 'epoch' => $h['e'], 'fallback_depth' => $e['fallback_depth'], 'degraded' => $e['degraded']];
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
