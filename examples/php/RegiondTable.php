<?php
// regiond snapshot reader for PHP front doors (PHP 8.1+, no extensions
// beyond the bundled hash and json).
//
// The regiond agent writes the /v1/table JSON (docs/agent.md) to a snapshot file
// (default /dev/shm/regiond/table.json) with an atomic rename. This reader
// loads that file and resolves viewers exactly as the agent's Resolve does
// (docs/resolution.md): normalize the country, take its precomputed `effective` entry,
// pick among its candidates (weighted rendezvous hashing for a sticky key,
// weighted random otherwise), and overlay the pool's attrs with the entry's.
//
//     $d = \Regiond\RegiondTable::load()->resolve($_SERVER['HTTP_CF_IPCOUNTRY'] ?? '', $viewerId);
//
// resolve() returns the Decision array and throws NoRouteException when no
// eligible pool exists; load() throws TableException when the file is
// missing or not a table.

declare(strict_types=1);

namespace Regiond;

/** The snapshot file is missing, unreadable or not a regiond table. */
class TableException extends \RuntimeException
{
}

/**
 * No eligible pool for the viewer (the agent's 503 NoRoute). $reasons says
 * why (`pool-down:eu-central`, `residency-blocked:us-east`, `no-route:BR`,
 * `stale-table`, ...).
 */
class NoRouteException extends \RuntimeException
{
    /** @param list<string> $reasons */
    public function __construct(
        public readonly string $country,
        public readonly array $reasons,
        public readonly int $revision,
        public readonly int $epoch,
    ) {
        parent::__construct(sprintf(
            'regiond: no eligible pool for %s (%s)',
            $country,
            $reasons === [] ? 'no reason given' : implode(', ', $reasons),
        ));
    }

    /**
     * The agent's NoRoute body: {"error","country","reasons"}.
     *
     * @return array{error: string, country: string, reasons: list<string>}
     */
    public function toArray(): array
    {
        return ['error' => 'no eligible pool', 'country' => $this->country, 'reasons' => $this->reasons];
    }
}

/**
 * One loaded snapshot. Instances are immutable; call load() again (it is
 * cheap: one stat) to pick up a newer file.
 */
final class RegiondTable
{
    public const DEFAULT_PATH = '/dev/shm/regiond/table.json';

    /**
     * Default max age of synced_at (written_at in files without it), in
     * seconds. A healthy agent confirms its table against etcd every few
     * seconds and rewrites the file at least every 60 s, so the file's
     * synced_at is at most ~75 s old; an older one means the agent lost
     * etcd (or stopped writing).
     */
    public const DEFAULT_MAX_AGE = 180.0;

    public const UNKNOWN = '_unknown';

    private const TWO_POW_53 = 9007199254740992.0;
    private const LETTERS = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';

    /**
     * Parsed snapshots by path, valid while the file's identity (device,
     * inode, size, mtime, ctime) is unchanged. Lives as long as the PHP
     * process keeps its statics: one request under php-fpm, the worker's
     * life under long-running servers.
     *
     * @var array<string, array{sig: string, digest: string, racy: bool, data: array<string, mixed>, written_at: float, synced_at: float}>
     */
    private static array $cache = [];

    private static int $reads = 0;
    private static int $parses = 0;

    /** @param array<string, mixed> $data */
    private function __construct(
        private readonly string $path,
        private readonly array $data,
        private readonly float $writtenAt,
        private readonly float $syncedAt,
        private readonly float $maxAge,
    ) {
    }

    /**
     * Loads the snapshot at $path, reusing the parsed table while the file
     * is unchanged. A table whose synced_at (when the agent last confirmed
     * it against etcd; written_at in files without it) is older than
     * $maxAgeSeconds is still served but is stale: isStale() says so and
     * every decision's degraded list carries `stale-table`, even while the
     * agent keeps rewriting the file.
     *
     * @throws TableException
     */
    public static function load(string $path = self::DEFAULT_PATH, float $maxAgeSeconds = self::DEFAULT_MAX_AGE): self
    {
        clearstatcache(true, $path);
        $st = @stat($path);
        if ($st === false) {
            throw new TableException("regiond: cannot stat snapshot {$path}");
        }
        $c = self::$cache[$path] ?? null;
        if ($c === null || $c['sig'] !== self::signature($st) || $c['racy']) {
            $c = self::read($path, $c);
            self::$cache[$path] = $c;
        }
        return new self($path, $c['data'], $c['written_at'], $c['synced_at'], $maxAgeSeconds);
    }

    /** Forgets every cached snapshot. */
    public static function clearCache(): void
    {
        self::$cache = [];
    }

    /**
     * How often this process read and parsed a snapshot file.
     *
     * @return array{reads: int, parses: int}
     */
    public static function cacheStats(): array
    {
        return ['reads' => self::$reads, 'parses' => self::$parses];
    }

    /**
     * Decides where the viewer goes. $country is the raw header value
     * ("pl", " PL ", "XX", "T1" and "" are accepted); $key is the sticky key
     * (null or "" for none). Returns the agent's Decision shape.
     *
     * @return array{country: string, route: string, pool: string, host: string, attrs: array<string, string>,
     *               revision: int, epoch: int, fallback_depth: int, degraded: list<string>}
     * @throws NoRouteException
     */
    public function resolve(string $country, ?string $key = null): array
    {
        $cc = $this->normalizeCountry($country);
        $e = $this->data['effective'][$cc];
        $degraded = $e['degraded'];
        if ($this->isStale() && !in_array('stale-table', $degraded, true)) {
            $degraded[] = 'stale-table';
        }
        $cands = $e['candidates'];
        if ($cands === []) {
            throw new NoRouteException($cc, $degraded, $this->data['revision'], $this->data['epoch']);
        }
        if ($key !== null && $key !== '' && $e['affinity'] !== 'random') {
            $c = $cands[self::pickSticky($cands, $key)];
        } else {
            $c = $cands[self::pickRandom($cands)];
        }
        $pool = $this->data['pools'][$c['pool']] ?? [];
        return [
            'country' => $cc,
            'route' => $e['route'],
            'pool' => $c['pool'],
            'host' => $c['host'],
            'attrs' => $e['attrs'] + ($pool['attrs'] ?? []),
            'revision' => $this->data['revision'],
            'epoch' => $this->data['epoch'],
            'fallback_depth' => $e['fallback_depth'],
            'degraded' => $degraded,
        ];
    }

    /**
     * The table's key for a raw country header: trimmed, upper-cased, and
     * an ISO 3166-1 alpha-2 code the table knows, otherwise "_unknown".
     */
    public function normalizeCountry(string $raw): string
    {
        $s = trim($raw, " \t\r\n");
        if (strlen($s) !== 2 || strspn($s, self::LETTERS) !== 2) {
            return self::UNKNOWN;
        }
        $s = strtr($s, 'abcdefghijklmnopqrstuvwxyz', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ');
        return isset($this->data['effective'][$s]) ? $s : self::UNKNOWN;
    }

    public function revision(): int
    {
        return $this->data['revision'];
    }

    public function epoch(): int
    {
        return $this->data['epoch'];
    }

    /** written_at as Unix seconds. */
    public function writtenAt(): float
    {
        return $this->writtenAt;
    }

    /** Seconds since written_at (negative if the agent's clock is ahead). */
    public function ageSeconds(): float
    {
        return microtime(true) - $this->writtenAt;
    }

    /**
     * synced_at as Unix seconds: when the agent last confirmed the table
     * against etcd (written_at for a file without synced_at).
     */
    public function syncedAt(): float
    {
        return $this->syncedAt;
    }

    /** Seconds since synced_at (negative if the agent's clock is ahead). */
    public function syncAgeSeconds(): float
    {
        return microtime(true) - $this->syncedAt;
    }

    /**
     * True when the agent marked the table stale (loaded from its own
     * snapshot, not yet confirmed against etcd) or synced_at is older than
     * the max age (the agent lost etcd, or stopped rewriting the file).
     */
    public function isStale(): bool
    {
        return $this->data['stale'] || $this->syncAgeSeconds() > $this->maxAge;
    }

    public function path(): string
    {
        return $this->path;
    }

    /**
     * h >> 11 of h = xxh64($key . "\0" . $pool, seed 0), as an exact integer
     * below 2^53 (computed from two 28-bit halves of the top 56 bits, so it
     * is exact even where PHP ints are 32-bit).
     */
    public static function stickyHash53(string $key, string $pool): int|float
    {
        $hex = hash('xxh64', $key . "\0" . $pool);
        // top 28 bits * 2^25 + (next 28 bits >> 3) = h >> 11
        $m = hexdec(substr($hex, 0, 7)) * 33554432 + (hexdec(substr($hex, 7, 7)) >> 3);
        return PHP_INT_SIZE >= 8 ? (int) $m : (float) $m;
    }

    /**
     * The rendezvous score of $pool for $key (docs/resolution.md, step 5):
     * u = ((h >> 11) + 0.5) / 2^53, score = -ln(u) / weight. Lower wins.
     */
    public static function stickyScore(string $key, string $pool, int $weight): float
    {
        $u = ((float) self::stickyHash53($key, $pool) + 0.5) / self::TWO_POW_53;
        return -log($u) / $weight;
    }

    /**
     * Index of the candidate with the lowest score; ties to the smaller pool
     * id (byte order). Weight-0 candidates are skipped unless all are 0.
     *
     * @param list<array{pool: string, host: string, weight: int}> $cands
     */
    private static function pickSticky(array $cands, string $key): int
    {
        $best = -1;
        $bestScore = 0.0;
        foreach ($cands as $i => $c) {
            if ($c['weight'] <= 0) {
                continue;
            }
            $s = self::stickyScore($key, $c['pool'], $c['weight']);
            if ($best < 0 || $s < $bestScore || ($s === $bestScore && strcmp($c['pool'], $cands[$best]['pool']) < 0)) {
                $best = $i;
                $bestScore = $s;
            }
        }
        return max($best, 0);
    }

    /** @param list<array{pool: string, host: string, weight: int}> $cands */
    private static function pickRandom(array $cands): int
    {
        $total = 0;
        foreach ($cands as $c) {
            $total += max($c['weight'], 0);
        }
        if ($total <= 0) {
            return 0;
        }
        $r = random_int(0, $total - 1);
        foreach ($cands as $i => $c) {
            $r -= max($c['weight'], 0);
            if ($r < 0) {
                return $i;
            }
        }
        return count($cands) - 1;
    }

    /** @param array<int|string, int> $st */
    private static function signature(array $st): string
    {
        return $st['dev'] . ':' . $st['ino'] . ':' . $st['size'] . ':' . $st['mtime'] . ':' . $st['ctime'];
    }

    /**
     * Reads and parses the file, or keeps $prev's parse when the bytes are
     * unchanged. An entry is "racy" while its mtime is within 2 s of the
     * read: file times have 1 s resolution here, so a rewrite in the same
     * second (same inode, same size) would not change the signature; a racy
     * entry is re-read on every load until it is old enough.
     *
     * @param array{sig: string, digest: string, racy: bool, data: array<string, mixed>, written_at: float, synced_at: float}|null $prev
     * @return array{sig: string, digest: string, racy: bool, data: array<string, mixed>, written_at: float, synced_at: float}
     */
    private static function read(string $path, ?array $prev): array
    {
        $fh = @fopen($path, 'rb');
        if ($fh === false) {
            throw new TableException("regiond: cannot open snapshot {$path}");
        }
        try {
            $st = fstat($fh); // the identity of exactly the bytes read
            $raw = stream_get_contents($fh);
        } finally {
            fclose($fh);
        }
        if ($st === false || $raw === false) {
            throw new TableException("regiond: cannot read snapshot {$path}");
        }
        self::$reads++;
        $entry = [
            'sig' => self::signature($st),
            'digest' => hash('xxh128', $raw),
            'racy' => microtime(true) < $st['mtime'] + 2,
        ];
        if ($prev !== null && $prev['digest'] === $entry['digest']) {
            return $entry + $prev;
        }
        [$data, $writtenAt, $syncedAt] = self::parse($raw, $path);
        self::$parses++;
        return $entry + ['data' => $data, 'written_at' => $writtenAt, 'synced_at' => $syncedAt];
    }

    /**
     * Decodes and checks the table JSON.
     *
     * @return array{0: array<string, mixed>, 1: float, 2: float} the table, written_at and synced_at
     *         (written_at when the file has none)
     */
    private static function parse(string $raw, string $path): array
    {
        try {
            $d = json_decode($raw, true, 512, JSON_THROW_ON_ERROR);
        } catch (\JsonException $e) {
            throw new TableException("regiond: snapshot {$path} is not JSON: {$e->getMessage()}", 0, $e);
        }
        $bad = static fn (string $what) => new TableException("regiond: snapshot {$path} is not a regiond table: {$what}");
        if (!is_array($d)) {
            throw $bad('not an object');
        }
        foreach (['revision', 'epoch'] as $k) {
            if (!is_int($d[$k] ?? null)) {
                throw $bad("{$k} is not an integer");
            }
        }
        if (!is_string($d['written_at'] ?? null)) {
            throw $bad('no written_at');
        }
        $writtenAt = self::parseTime($d['written_at']);
        if ($writtenAt === null) {
            throw $bad("written_at {$d['written_at']} is not RFC 3339");
        }
        $syncedAt = $writtenAt;
        if (array_key_exists('synced_at', $d)) {
            $syncedAt = is_string($d['synced_at']) ? self::parseTime($d['synced_at']) : null;
            if ($syncedAt === null) {
                throw $bad('synced_at ' . json_encode($d['synced_at']) . ' is not RFC 3339');
            }
        }
        $d['stale'] = ($d['stale'] ?? false) === true;
        if (!is_array($d['pools'] ?? null) || !is_array($d['effective'] ?? null)) {
            throw $bad('no pools or effective');
        }
        if (!isset($d['effective'][self::UNKNOWN])) {
            throw $bad('effective has no _unknown entry');
        }
        foreach ($d['effective'] as $cc => &$e) {
            if (
                !is_array($e) || !is_string($e['route'] ?? null) || !is_int($e['fallback_depth'] ?? null)
                || !is_array($e['candidates'] ?? null) || !is_array($e['degraded'] ?? [])
                || !is_array($e['attrs'] ?? [])
            ) {
                throw $bad("effective entry {$cc} is malformed");
            }
            $e['affinity'] = (string) ($e['affinity'] ?? '');
            $e['attrs'] ??= [];
            $e['degraded'] ??= [];
            foreach ($e['candidates'] as $c) {
                if (!is_string($c['pool'] ?? null) || !is_string($c['host'] ?? null) || !is_int($c['weight'] ?? null)) {
                    throw $bad("a candidate of effective entry {$cc} is malformed");
                }
            }
        }
        unset($e);
        return [$d, $writtenAt, $syncedAt];
    }

    /** RFC 3339 (Go's RFC3339Nano) to Unix seconds, or null. */
    private static function parseTime(string $s): ?float
    {
        $re = '/^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/';
        if (!preg_match($re, $s, $m)) {
            return null;
        }
        $t = gmmktime((int) $m[4], (int) $m[5], (int) $m[6], (int) $m[2], (int) $m[3], (int) $m[1]);
        if ($t === false) {
            return null;
        }
        $t += (float) ('0' . ($m[7] ?? ''));
        if (($m[8] ?? '') !== '') {
            $off = (int) $m[9] * 3600 + (int) $m[10] * 60;
            $t += $m[8] === '+' ? -$off : $off;
        }
        return $t;
    }
}
