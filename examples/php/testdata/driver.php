<?php
// Test driver for reader_test.go. Modes:
//
//   php driver.php resolve TABLE MAXAGE < pairs
//       pairs: one per line, "HEXCOUNTRY HEXKEY" (either may be empty).
//       Prints a meta line {"revision","epoch","stale","index"}, then one JSON line
//       per pair: {"ok":true,"d":Decision} or {"ok":false,"country","reasons",
//       "revision","epoch"}.
//   php driver.php sweep TABLE MAXAGE < {"headers": [hex], "keys": [hex]}
//       Resolves every header without a key and with every key, each through
//       resolve() (an index read per decision when the table has an index).
//       Prints the meta line, then one JSON line per header (fleettest.SweepLine):
//       {"outcomes": [O], "ids": "…"}: its distinct outcomes, O being {"ok":true,
//       "d":Decision} or {"ok":false,"error":"NoRouteException","noroute":{"country",
//       "reasons","revision","epoch"},"body"}, and one character of IDS per
//       decision naming its outcome: ids[0] without a key, ids[1 + j] with key j.
//   php driver.php meta TABLE MAXAGE [OWNER]
//       Prints {"revision","epoch","stale","written_at","synced_at"} (Unix
//       seconds) of the table, or {"error"} when it does not load; OWNER (a
//       uid or a user name; "" reads any owner's) is load()'s owner, "-"
//       load()'s default, absent this process's uid (the test's files are its own).
//
// Every other mode loads with this process's uid as the owner, as a front
// door names the agent's user: the tests write their tables as themselves.
//   php driver.php scores < triples
//       triples: "HEXKEY HEXPOOL WEIGHT". Prints "H53 SCOREBITS" per line,
//       SCOREBITS being the IEEE-754 bits of the score as 16 hex digits.
//   php driver.php race INDEX STOPFILE CYCLE
//       Loads INDEX and resolves PL and XX with a sticky key in a loop until
//       STOPFILE exists, then once more; each table's routes carry attrs gen, equal to its
//       revision modulo CYCLE.
//       Prints "ready" after the first load, then one JSON object: loads,
//       errors (count and the first messages), mixed (a decision whose gen is
//       not its revision), backwards (a revision lower than the one before),
//       distinct revisions seen, first and last.
//   php driver.php ownerloop TABLE OWNER N FORGED
//       Loads TABLE N times with load()'s owner OWNER, the parse cache cleared
//       before each; prints {"forged","refused","loaded"}: the loads that
//       returned revision FORGED, that threw, and the others.
//   php driver.php wholenumbers INTMAX LITERAL...
//       Decodes each JSON literal as a PHP with ints up to INTMAX would (a
//       float past it) and prints how the reader judges it as a revision.
//   php driver.php cache DIR A B C
//       Exercises the parse cache with tables A, B, C (revisions 11, 12, 13;
//       A and B of the same size) in DIR; prints one JSON object.

declare(strict_types=1);

require __DIR__ . '/../RegiondTable.php';

use Regiond\NoRouteException;
use Regiond\RegiondTable;
use Regiond\TableException;

if (!in_array('xxh64', hash_algos(), true)) {
    fwrite(STDERR, "this PHP has no xxh64 hash: PHP 8.1+ is required\n");
    exit(2);
}

$mode = $argv[1] ?? '';

function lines(): \Generator
{
    while (($line = fgets(STDIN)) !== false) {
        yield explode(' ', rtrim($line, "\n"));
    }
}

function unhex(string $s): string
{
    $b = hex2bin($s);
    if ($b === false) {
        throw new \RuntimeException("bad hex {$s}");
    }
    return $b;
}

// ME is this process's uid: the owner of the tables the tests write.
define('ME', posix_geteuid());

// IDS are the characters of outcome indices 0..63 (fleettest.IDChars).
const IDS = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_';

function out(mixed $v): void
{
    echo json_encode($v, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES), "\n";
}

switch ($mode) {
    case 'resolve':
        $t = RegiondTable::load($argv[2], (float) $argv[3], ME);
        out(['revision' => $t->revision(), 'epoch' => $t->epoch(), 'stale' => $t->isStale(), 'index' => $t->fromIndex()]);
        foreach (lines() as [$hc, $hk]) {
            try {
                $d = $t->resolve(unhex($hc), $hk === '' ? null : unhex($hk));
                $d['attrs'] = (object) $d['attrs'];
                out(['ok' => true, 'd' => $d]);
            } catch (NoRouteException $e) {
                out(['ok' => false, 'country' => $e->country, 'reasons' => $e->reasons,
                    'revision' => $e->revision, 'epoch' => $e->epoch, 'body' => $e->toArray()]);
            }
        }
        break;

    case 'sweep':
        $t = RegiondTable::load($argv[2], (float) $argv[3], ME);
        out(['revision' => $t->revision(), 'epoch' => $t->epoch(), 'stale' => $t->isStale(), 'index' => $t->fromIndex()]);
        $in = json_decode((string) stream_get_contents(STDIN), true, 512, JSON_THROW_ON_ERROR);
        $keys = array_map('unhex', $in['keys']);
        foreach ($in['headers'] as $hh) {
            $h = unhex($hh);
            $outcomes = [];
            $ids = '';
            foreach ([null, ...$keys] as $key) {
                try {
                    $o = ['ok' => true, 'd' => $t->resolve($h, $key)];
                } catch (NoRouteException $e) {
                    $o = ['ok' => false, 'error' => 'NoRouteException', 'noroute' => ['country' => $e->country,
                        'reasons' => $e->reasons, 'revision' => $e->revision, 'epoch' => $e->epoch], 'body' => $e->toArray()];
                }
                // Distinct outcomes by value (===: the same members, in order, of the same types).
                $i = array_search($o, $outcomes, true);
                if ($i === false) {
                    if (count($outcomes) === strlen(IDS)) {
                        throw new \RuntimeException('more than ' . strlen(IDS) . " distinct outcomes for header {$hh}");
                    }
                    $i = count($outcomes);
                    $outcomes[] = $o;
                }
                $ids .= IDS[$i];
            }
            foreach ($outcomes as &$o) {
                if ($o['ok']) {
                    $o['d']['attrs'] = (object) $o['d']['attrs'];
                }
            }
            unset($o);
            out(['outcomes' => $outcomes, 'ids' => $ids]);
        }
        break;

    case 'meta':
        try {
            $owner = $argv[4] ?? ME;
            $t = $owner === '-' ? RegiondTable::load($argv[2], (float) $argv[3]) : RegiondTable::load($argv[2], (float) $argv[3], $owner);
            out(['revision' => $t->revision(), 'epoch' => $t->epoch(), 'stale' => $t->isStale(),
                'written_at' => $t->writtenAt(), 'synced_at' => $t->syncedAt()]);
        } catch (TableException $e) {
            out(['error' => $e->getMessage()]);
        }
        break;

    case 'scores':
        foreach (lines() as [$hk, $hp, $w]) {
            $key = unhex($hk);
            $pool = unhex($hp);
            $s = RegiondTable::stickyScore($key, $pool, (int) $w);
            echo RegiondTable::stickyHash53($key, $pool), ' ', bin2hex(strrev(pack('e', $s))), "\n";
        }
        break;

    case 'ownerloop':
        [, , $table, $owner, $n, $forged] = $argv;
        $res = ['forged' => 0, 'refused' => 0, 'loaded' => 0];
        for ($i = 0; $i < (int) $n; $i++) {
            RegiondTable::clearCache();
            try {
                $rev = RegiondTable::load($table, 180.0, $owner)->revision();
                $res[$rev === (int) $forged ? 'forged' : 'loaded']++;
            } catch (TableException $e) {
                $res['refused']++;
            }
        }
        out($res);
        break;

    case 'race':
        [, , $idx, $stop, $cycle] = $argv;
        $cycle = (int) $cycle;
        $res = ['loads' => 0, 'errors' => 0, 'messages' => [], 'mixed' => 0, 'backwards' => 0,
            'revisions' => 0, 'first' => 0, 'last' => 0];
        $prev = 0;
        // The writer creates STOPFILE after its last rename, so the load that
        // follows seeing it is the last one and must see the last revision.
        for ($i = 0, $stopping = false; !$stopping; $i++) {
            if ($i % 32 === 0 && $i > 0) {
                clearstatcache(true, $stop);
                $stopping = file_exists($stop);
            }
            try {
                $t = RegiondTable::load($idx, owner: ME);
                $rev = $t->revision();
                foreach (['PL', 'XX'] as $cc) {
                    $d = $t->resolve($cc, 'viewer-' . ($i % 97));
                    $gen = $d['attrs']['gen'] ?? null;
                    if (!is_string($gen) || (int) $gen % $cycle !== $d['revision'] % $cycle || $d['revision'] !== $rev) {
                        $res['mixed']++;
                    }
                }
            } catch (\Throwable $e) {
                $res['errors']++;
                if (count($res['messages']) < 5) {
                    $res['messages'][] = $e->getMessage();
                }
                continue;
            }
            $res['loads']++;
            if ($rev < $prev) {
                $res['backwards']++;
            }
            if ($rev !== $prev) {
                $res['revisions']++;
            }
            if ($res['loads'] === 1) {
                $res['first'] = $rev;
                echo "ready\n";
                fflush(STDOUT);
            }
            $prev = $rev;
            $res['last'] = $rev;
            unset($t);
            usleep(500); // leave the writer some CPU: 8 readers share 2 cores with it
        }
        out($res);
        break;

    case 'cache':
        // DIR is a scratch directory; A, B and C are tables with revisions
        // 11, 12 and 13, A and B of the same size.
        [, , $dir, $a, $b, $c] = $argv;
        $path = $dir . '/table.json';
        $res = [];
        $rev = static function () use ($path): int|string {
            try {
                return RegiondTable::load($path, owner: ME)->revision();
            } catch (TableException $e) {
                return 'error: ' . $e->getMessage();
            }
        };
        $sig = static function () use ($path): string {
            clearstatcache(true, $path);
            $st = stat($path);
            return "{$st['dev']}:{$st['ino']}:{$st['size']}:{$st['mtime']}:{$st['ctime']}";
        };
        // Start just after a second boundary so that the in-place rewrite
        // below lands in the same mtime second as the first write.
        $frac = microtime(true) - floor(microtime(true));
        if ($frac > 0.02) {
            usleep((int) ((1.0 - $frac) * 1e6) + 1000);
        }
        file_put_contents($path, file_get_contents($a));
        $sigA = $sig();
        $res['first'] = $rev();
        $res['second'] = $rev();
        $res['stats_a'] = RegiondTable::cacheStats();
        // Rewrite in place: same inode, same size, same mtime second. The
        // signature cannot tell; only the racy re-read notices.
        $fh = fopen($path, 'r+b');
        fwrite($fh, file_get_contents($b));
        fclose($fh);
        $res['same_signature'] = $sig() === $sigA;
        $res['in_place'] = $rev();
        $res['stats_b'] = RegiondTable::cacheStats();
        // Atomic replace, as the agent does.
        copy($c, $path . '.tmp');
        rename($path . '.tmp', $path);
        $res['renamed'] = $rev();
        $res['stats_c'] = RegiondTable::cacheStats();
        // Age the file: its signature changes (re-read, same bytes: no
        // parse), then it is no longer racy (no read at all).
        touch($path, time() - 100);
        $res['aged'] = $rev();
        $res['stats_aged'] = RegiondTable::cacheStats();
        $res['aged_again'] = $rev();
        $res['stats_aged_again'] = RegiondTable::cacheStats();
        file_put_contents($path . '.tmp', '{"revision": 1, "epoch"');
        rename($path . '.tmp', $path);
        $res['garbage'] = $rev();
        file_put_contents($path . '.tmp', '{"revision": 1, "epoch": 2, "written_at": "yesterday"}');
        rename($path . '.tmp', $path);
        $res['not_table'] = $rev();
        unlink($path);
        $res['missing'] = $rev();
        out($res);
        break;

    case 'wholenumbers':
        // A 32-bit PHP's json_decode gives a float for an integer past
        // PHP_INT_MAX: each literal decoded so, then judged as by a reader
        // whose ints are 32-bit (INTMAX 2147483647) or this PHP's.
        [, , $intMax] = $argv;
        $intMax = (int) $intMax;
        $judge = new ReflectionMethod(RegiondTable::class, 'wholeNumber');
        $res = [];
        foreach (array_slice($argv, 3) as $lit) {
            $v = json_decode($lit);
            if (is_int($v) && $v > $intMax) {
                $v = (float) $v;
            }
            $got = $judge->invoke(null, $v, $intMax);
            $res[] = $lit . ' ' . get_debug_type($v) . ' -> ' . ($got === null ? 'null' : get_debug_type($got) . ' ' . sprintf('%.0f', $got));
        }
        out($res);
        break;

    default:
        fwrite(STDERR, "usage: driver.php resolve|sweep|meta|scores|race|cache|wholenumbers ...\n");
        exit(2);
}
