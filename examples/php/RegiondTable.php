<?php
// regiond snapshot reader for PHP front doors (PHP 8.1+, no extensions
// beyond the bundled hash and json).
//
// The regiond agent writes the /v1/table JSON (docs/agent.md) to a snapshot file
// (default /dev/shm/regiond/table.json) with an atomic rename, and beside it
// the per-country index table.idx (docs/snapshot-index.md). This reader opens
// the index per load() and reads only the header, then per resolve() one slot
// and one country's entry, from the same descriptor: one consistent table,
// no shared cache. Only when there is no index does it read the full JSON.
// It resolves viewers exactly as the agent's Resolve does (docs/resolution.md):
// normalize the country, take its precomputed entry, pick among its
// candidates (weighted rendezvous hashing for a sticky key, weighted random
// otherwise); each candidate's attrs are the pool's overlaid by the entry's.
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
        public readonly int|float $revision,
        public readonly int|float $epoch,
    ) {
        parent::__construct(sprintf(
            'regiond: no eligible pool for %s (%s)',
            $country,
            $reasons === [] ? 'no reason given' : implode(', ', $reasons),
        ));
    }

    /**
     * The agent's NoRoute body: {"error","country","reasons","revision","epoch"},
     * the members the agent leaves out when empty left out, as it does
     * (epoch is always there: 0 too).
     *
     * @return array{error: string, code: string, country?: string, reasons?: list<string>, revision?: int|float, epoch: int|float}
     */
    public function toArray(): array
    {
        $b = ['error' => 'no eligible pool', 'code' => 'no_route'];
        if ($this->country !== '') {
            $b['country'] = $this->country;
        }
        if ($this->reasons !== []) {
            $b['reasons'] = $this->reasons;
        }
        if ($this->revision !== 0) {
            $b['revision'] = $this->revision;
        }
        $b['epoch'] = $this->epoch;
        return $b;
    }
}

/**
 * One loaded snapshot. Instances are immutable; call load() again per
 * request (it is cheap: an open and two small reads) to pick up a newer file.
 * An instance read from the index holds the index file open (PHP closes it
 * when the instance is freed) and reads every entry from it, so it answers
 * from one table however often the agent rewrites the file meanwhile.
 */
final class RegiondTable
{
    public const DEFAULT_PATH = '/dev/shm/regiond/table.json';

    /**
     * The agent's user load() checks the snapshot's owner against when
     * none is given: the Debian package's (its unit runs the agent as
     * user regiond).
     */
    public const DEFAULT_OWNER = 'regiond';

    /** Index format versions this reader knows (docs/snapshot-index.md). */
    public const INDEX_VERSIONS = [1];
    private const INDEX_MAGIC = 'RGIX';
    private const INDEX_SLOTS = 677;
    private const INDEX_UNKNOWN_SLOT = 676;
    /** Opens the header block, right after the slot table. */
    private const BLOCK_MAGIC = 'RGHB';
    /** Bytes load() reads at once: prefix, header, slot table and header block. */
    private const HEAD_READ = 8448;

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
    private static int $indexReads = 0;

    /**
     * @param array<string, mixed> $data the table JSON (when read from it), else []
     * @param resource|null $fh the open index (when read from it)
     * @param int $slots offset of the index's slot table
     * @param string $head the index's first bytes as read by load(): the
     *        header and, for headers up to ~300 bytes, the whole slot table
     */
    private function __construct(
        private readonly string $path,
        private readonly array $data,
        private readonly float $writtenAt,
        private readonly float $syncedAt,
        private readonly float $maxAge,
        private readonly int|float $revision = 0,
        private readonly int|float $epoch = 0,
        private readonly bool $stale = false,
        private readonly mixed $fh = null,
        private readonly int $slots = 0,
        private readonly string $head = '',
    ) {
    }

    /**
     * The index path for a snapshot path: a .json suffix replaced by .idx,
     * else .idx appended (what the agent writes).
     */
    public static function indexPath(string $path): string
    {
        return str_ends_with($path, '.json') ? substr($path, 0, -5) . '.idx' : $path . '.idx';
    }

    /**
     * Loads the snapshot at $path, reusing the parsed table while the file
     * is unchanged. A table whose synced_at (when the agent last confirmed
     * it against etcd; written_at in files without it) is older than
     * $maxAgeSeconds is still served but is stale: isStale() says so and
     * every decision's degraded list carries `stale-table`, even while the
     * agent keeps rewriting the file.
     *
     * $owner is the agent's user: a uid, or a name, looked up once per
     * request (pass the uid where user lookups go to a directory service).
     * The reader refuses a file the agent cannot have written: one owned by
     * another user, or writable by group or others, or in a directory owned
     * by neither that user nor root, or writable by group or others. By
     * default (omitted, or null) it is the package's agent user,
     * DEFAULT_OWNER ('regiond'); name another where the agent runs as
     * another user (your own under `regiond dev`). A user that does not
     * exist is a TableException saying what to pass. '' reads a file of any
     * owner: unsafe wherever another local user could create the snapshot's
     * directory first (the agent's default /dev/shm/regiond is in a
     * world-writable directory; the agent then refuses to start, but a
     * forged table would stay in place for the front doors). The check
     * costs one fstat and one stat per request.
     *
     * @throws TableException
     */
    public static function load(
        string $path = self::DEFAULT_PATH,
        float $maxAgeSeconds = self::DEFAULT_MAX_AGE,
        int|string|null $owner = self::DEFAULT_OWNER,
    ): self {
        // NaN compares false (staleness off), INF never turns stale, 0
        // or less always is: none is a max age, as the JS reader holds.
        if (is_nan($maxAgeSeconds) || is_infinite($maxAgeSeconds) || $maxAgeSeconds <= 0) {
            throw new \ValueError("regiond: max age {$maxAgeSeconds}: want a positive number of seconds (e.g. 180)");
        }
        $owner ??= self::DEFAULT_OWNER;
        $uid = $owner === '' ? null : self::ownerUid($owner);
        $idx = str_ends_with($path, '.idx') ? $path : self::indexPath($path);
        if ($uid !== null) {
            // The directory the file is in, a symlink's target's (a link to
            // /run/regiond/table.idx from the web root: that directory is
            // the deployer's, as the PHP code beside it is). The JSON's too:
            // the index is beside it.
            clearstatcache(true, $idx);
            // @: outside open_basedir realpath() warns (and fails); the
            // directory check below then throws, naming the directory and
            // the restriction.
            $real = @realpath($idx);
            self::checkDir(dirname($real !== false ? $real : $idx), $uid, $owner);
        }
        $fh = @fopen($idx, 'rb');
        $idxWhy = $fh === false ? self::lastError() : '';
        if ($fh !== false) {
            if ($uid !== null) {
                $st = fstat($fh);
                if ($st === false || ($why = self::untrusted($st, $uid, $owner)) !== null) {
                    fclose($fh);
                    throw new TableException("regiond: snapshot index {$idx} " . ($why ?? 'cannot be checked (fstat failed): refusing a table the agent may not have written'));
                }
            }
            return self::openIndex($path, $idx, $fh, $maxAgeSeconds);
        }
        clearstatcache(true, $idx);
        if ($idx === $path || file_exists($idx)) {
            throw new TableException("regiond: cannot open snapshot index {$idx}: {$idxWhy}");
        }
        return self::loadJSON($path, $maxAgeSeconds, $uid, $owner, $idxWhy === '' ? '' : " (nor the index {$idx}: {$idxWhy})");
    }

    /** The message of PHP's last error (a failed fopen's: "No such file or directory", an open_basedir refusal), or "unknown error". */
    private static function lastError(): string
    {
        $e = error_get_last();
        if ($e === null) {
            return 'unknown error';
        }
        // "fopen(/path): Failed to open stream: No such file or directory" → what follows the call
        $m = $e['message'];
        $i = strpos($m, '): ');
        $m = $i === false ? $m : substr($m, $i + 3);
        return preg_replace('/^failed to open stream: /i', '', $m);
    }

    /** @var array<string, int> owner names resolved to uids: for the request under PHP-FPM (static state is reset after each), for the worker's life in a long-running worker */
    private static array $uids = [];

    /**
     * The uid of $owner: an int is one; a string of digits too; any other
     * string is a user name, looked up once per request (posix extension;
     * PHP-FPM resets static state after each request; a long-running
     * worker keeps the uid for its life).
     *
     * @throws TableException
     */
    private static function ownerUid(int|string $owner): int
    {
        if (is_int($owner)) {
            if ($owner < 0) {
                throw new TableException("regiond: owner {$owner}: a uid is not negative; " . self::ownerHint());
            }
            return $owner;
        }
        if (strspn($owner, '0123456789') === strlen($owner)) { // not ctype_digit: ctype may be missing; '' is no owner, not here
            return (int) $owner;
        }
        if (isset(self::$uids[$owner])) {
            return self::$uids[$owner];
        }
        $which = $owner === self::DEFAULT_OWNER ? "owner '{$owner}' (the default: the package's agent user)" : "owner '{$owner}'";
        if (!function_exists('posix_getpwnam')) {
            throw new TableException("regiond: {$which} given by name needs PHP's posix extension; pass its uid (owner: `id -u {$owner}`), " . self::ownerHint());
        }
        $pw = posix_getpwnam($owner);
        if ($pw === false) {
            throw new TableException("regiond: {$which}: no such user on this host; " . self::ownerHint());
        }
        return self::$uids[$owner] = $pw['uid'];
    }

    /** What to pass instead of an owner that is not the agent's user. */
    private static function ownerHint(): string
    {
        return "name the user the agent runs as, load(\$path, owner: 'USER') (or its uid; under `regiond dev` your own user), "
            . "or owner: '' to read a snapshot of any owner (unsafe where other local users could make the snapshot's directory first, as in /dev/shm)";
    }

    /**
     * Why a snapshot file with stat $st is not to be trusted as the agent's
     * (owner $owner, uid $uid), or null: it must be a regular file owned by
     * $uid and writable by no one else (group or others). The reason ends
     * the message: it says the file is refused (and, for another owner,
     * what to pass).
     *
     * @param array<int|string, int> $st
     */
    private static function untrusted(array $st, int $uid, int|string $owner): ?string
    {
        $refusing = ': refusing a table the agent may not have written';
        if (($st['mode'] & 0o170000) !== 0o100000) {
            return sprintf('is not a regular file (mode %06o)', $st['mode']) . $refusing;
        }
        if ($st['uid'] !== $uid) {
            return "is owned by uid {$st['uid']}, not the agent's uid {$uid}" . self::ownerName($owner, $uid) . $refusing . '; ' . self::ownerHint();
        }
        if (($st['mode'] & 0o022) !== 0) {
            return sprintf('is writable by group or others (mode %04o)', $st['mode'] & 0o7777) . $refusing;
        }
        return null;
    }

    /** " (owner 'regiond')" for an owner given by name, '' for a uid. */
    private static function ownerName(int|string $owner, int $uid): string
    {
        return is_string($owner) && $owner !== (string) $uid ? " (owner '{$owner}')" : '';
    }

    /**
     * Refuses a snapshot directory others could have put a file in: one
     * owned by neither the agent ($uid) nor root, or writable by group or
     * others (the agent refuses such a directory at start too). Checked
     * before the open: a FIFO in the file's place would block fopen
     * forever (PHP cannot open with O_NONBLOCK), and only the directory's
     * owner can put one there.
     *
     * @throws TableException
     */
    private static function checkDir(string $dir, int $uid, int|string $owner): void
    {
        clearstatcache(true, $dir);
        $st = @stat($dir);
        if ($st === false) {
            // stat's own failure names no cause; opendir's does (missing,
            // permission denied). An open_basedir refusal names itself.
            $why = self::lastError();
            if (str_contains($why, 'stat failed')) {
                $d = @opendir($dir);
                if ($d === false) {
                    $why = self::lastError();
                } else {
                    closedir($d);
                }
            }
            throw new TableException("regiond: cannot stat snapshot directory {$dir}: {$why}");
        }
        if ($st['uid'] !== $uid && $st['uid'] !== 0) {
            throw new TableException("regiond: snapshot directory {$dir} is owned by uid {$st['uid']}, not the agent's uid {$uid}"
                . self::ownerName($owner, $uid) . ' nor root: refusing a table the agent may not have written; ' . self::ownerHint());
        }
        if (($st['mode'] & 0o022) !== 0) {
            throw new TableException(sprintf(
                'regiond: snapshot directory %s is writable by group or others (mode %04o): refusing a table the agent may not have written',
                $dir,
                $st['mode'] & 0o7777,
            ));
        }
    }

    /**
     * Reads the index header from $fh (the index $idx of snapshot $path).
     *
     * @param resource $fh
     * @throws TableException
     */
    private static function openIndex(string $path, string $idx, $fh, float $maxAge): self
    {
        self::$indexReads++;
        // Unbuffered: each fread is one read(2) of what is asked, not of
        // 8 KB. The first one takes the prefix, the header and (for a
        // header up to HEAD_READ - 8 - 8124 - 40 bytes, ~160 in practice)
        // the whole slot table and the header block, so resolve() reads
        // only its entry.
        stream_set_read_buffer($fh, 0);
        $pre = fread($fh, self::HEAD_READ);
        if ($pre === false || strlen($pre) < 8) {
            fclose($fh);
            throw new TableException("regiond: snapshot index {$idx} is too short");
        }
        if (substr($pre, 0, 4) !== self::INDEX_MAGIC) {
            fclose($fh);
            throw new TableException("regiond: {$idx} is not a regiond snapshot index (bad magic)");
        }
        ['v' => $version, 'h' => $hlen] = unpack('vv/vh', $pre, 4);
        if (!in_array($version, self::INDEX_VERSIONS, true)) {
            fclose($fh);
            throw new TableException(sprintf(
                'regiond: snapshot index %s has format version %d; this reader knows version %s',
                $idx,
                $version,
                implode(', ', self::INDEX_VERSIONS),
            ));
        }
        // The header block (after the slot table, from agents that write
        // it): the header's fields without decoding JSON or dates. Files
        // without it, or headers too long for the first read, take the
        // header JSON.
        $at = 8 + $hlen + 12 * self::INDEX_SLOTS;
        if (PHP_INT_SIZE >= 8 && strlen($pre) >= $at + 40 && substr($pre, $at, 4) === self::BLOCK_MAGIC) {
            ['f' => $flags, 'r' => $rev, 'e' => $epoch, 'w' => $w, 's' => $synced] = unpack('Vf/Pr/Pe/Pw/Ps', $pre, $at + 4);
            $w /= 1e9;
            return new self($idx, [], $w, ($flags & 2) !== 0 ? $synced / 1e9 : $w, $maxAge, $rev, $epoch,
                ($flags & 1) !== 0, $fh, 8 + $hlen, $pre);
        }
        $raw = substr($pre, 8, $hlen);
        while (strlen($raw) < $hlen) {
            $more = fread($fh, $hlen - strlen($raw));
            if ($more === false || $more === '') {
                break;
            }
            $raw .= $more;
        }
        $h = is_string($raw) && strlen($raw) === $hlen ? json_decode($raw, true) : null;
        if (
            !is_array($h) || self::wholeNumber($h['revision'] ?? null) === null || self::wholeNumber($h['epoch'] ?? null) === null
            || !is_string($h['written_at'] ?? null) || ($h['slots'] ?? null) !== self::INDEX_SLOTS
            || !in_array($h['format'] ?? null, self::INDEX_VERSIONS, true)
        ) {
            fclose($fh);
            throw new TableException("regiond: snapshot index {$idx} has a malformed header");
        }
        $writtenAt = self::parseTime($h['written_at']);
        $syncedAt = $writtenAt;
        if (($h['synced_at'] ?? '') !== '') {
            $syncedAt = is_string($h['synced_at']) ? self::parseTime($h['synced_at']) : null;
        }
        if ($writtenAt === null || $syncedAt === null) {
            fclose($fh);
            throw new TableException("regiond: snapshot index {$idx}: written_at or synced_at is not RFC 3339");
        }
        return new self($idx, [], $writtenAt, $syncedAt, $maxAge, $h['revision'], $h['epoch'],
            ($h['stale'] ?? false) === true, $fh, 8 + $hlen, $pre);
    }

    /**
     * The JSON reader: loads the full snapshot, reusing the parsed table
     * while the file is unchanged.
     *
     * @throws TableException
     */
    private static function loadJSON(string $path, float $maxAgeSeconds, ?int $uid, int|string $owner, string $also = ''): self
    {
        // One descriptor for all of it: the owner check, the cache's
        // signature and the bytes read are of the same file, so a path
        // swapped between a check and a read cannot slip a file in.
        clearstatcache(true, $path); // and the realpath cache: a symlink may have moved
        $fh = @fopen($path, 'rb');
        if ($fh === false) {
            throw new TableException("regiond: cannot open snapshot {$path}: " . self::lastError() . $also);
        }
        try {
            $st = fstat($fh);
            if ($st === false) {
                throw new TableException("regiond: cannot stat snapshot {$path}");
            }
            if ($uid !== null && ($why = self::untrusted($st, $uid, $owner)) !== null) {
                throw new TableException("regiond: snapshot {$path} {$why}");
            }
            $c = self::$cache[$path] ?? null;
            if ($c === null || $c['sig'] !== self::signature($st) || $c['racy']) {
                $c = self::read($path, $fh, $st, $c);
                self::$cache[$path] = $c;
            }
        } finally {
            fclose($fh);
        }
        return new self($path, $c['data'], $c['written_at'], $c['synced_at'], $maxAgeSeconds,
            $c['data']['revision'], $c['data']['epoch'], $c['data']['stale']);
    }

    /** Forgets every cached snapshot. */
    public static function clearCache(): void
    {
        self::$cache = [];
    }

    /**
     * How often this process read and parsed a snapshot JSON file, and
     * opened an index.
     *
     * @return array{reads: int, parses: int, index_reads: int}
     */
    public static function cacheStats(): array
    {
        return ['reads' => self::$reads, 'parses' => self::$parses, 'index_reads' => self::$indexReads];
    }

    /** True when this instance reads the per-country index (not the JSON). */
    public function fromIndex(): bool
    {
        return $this->fh !== null;
    }

    /**
     * Decides where the viewer goes. $country is the raw header value
     * ("pl", " PL ", "XX", "T1" and "" are accepted); $key is the sticky key
     * (null or "" for none). Returns the agent's Decision shape.
     *
     * @return array{country: string, route: string, pool: string, host: string, attrs: array<string, string>,
     *               revision: int|float, epoch: int|float, fallback_depth: int, degraded: list<string>}
     *         (revision and epoch: whole floats only on 32-bit PHP past 2^31)
     * @throws NoRouteException
     */
    public function resolve(string $country, ?string $key = null): array
    {
        if ($this->fh !== null) {
            return $this->resolveIndexed($country, $key);
        }
        $cc = $this->normalizeCountry($country);
        $e = $this->data['effective'][$cc];
        $degraded = $e['degraded'];
        if ($this->isStale() && !in_array('stale-table', $degraded, true)) {
            $degraded[] = 'stale-table';
        }
        $cands = $e['candidates'];
        if ($cands === []) {
            throw new NoRouteException($cc, $degraded, $this->revision, $this->epoch);
        }
        $pick = $key !== null && $key !== '' && $e['affinity'] !== 'random'
            ? self::pickSticky($cands, $key) : self::pickRandom($cands);
        if ($pick < 0) {
            throw new TableException("regiond: snapshot {$this->path}: effective entry {$cc} has a malformed candidate");
        }
        $c = $cands[$pick];
        $pool = $this->data['pools'][$c['pool']] ?? [];
        return [
            'country' => $cc,
            'route' => $e['route'],
            'pool' => $c['pool'],
            'host' => $c['host'],
            'attrs' => $e['attrs'] + ($pool['attrs'] ?? []),
            'revision' => $this->revision,
            'epoch' => $this->epoch,
            'fallback_depth' => $e['fallback_depth'],
            'degraded' => $degraded,
        ];
    }

    /**
     * resolve() from the index: one slot, one entry, checked as far as the
     * decision uses it. This is the front door's per-request path, kept to
     * one method on purpose: under php-fpm every request runs it with cold
     * caches, where each further call and check costs several times its
     * warm price.
     *
     * @throws NoRouteException
     * @throws TableException
     */
    private function resolveIndexed(string $raw, ?string $key): array
    {
        $i = self::slotOf($raw);
        ['o' => $off, 'n' => $len, 'k' => $kind] = $this->slot($i);
        if ($kind > 1) { // 0 a country, 1 the unknown entry: as Go's and JS's readers
            throw $this->badSlot($i, "unknown slot kind {$kind}");
        }
        // A forged length would have fread allocate it whole (a fatal
        // out-of-memory, not a TableException): past 1 MiB, check it
        // against the file first.
        if ($len > 1 << 20 && (($st = fstat($this->fh)) === false || $off + $len > $st['size'])) {
            throw $this->badSlot($i, "the entry at {$off}+{$len} is past the end of the file");
        }
        if ($len <= 0 || fseek($this->fh, $off) !== 0 || strlen($js = (string) fread($this->fh, $len)) !== $len) {
            throw $this->badSlot($i, "cannot read the entry at {$off}+{$len}");
        }
        $e = json_decode($js, true);
        $cands = $e['candidates'] ?? null;
        if (!is_array($cands) || !array_is_list($cands) || !is_string($e['route'] ?? null) || !is_int($e['fallback_depth'] ?? null) || !is_array($e['degraded'] ?? null)) {
            throw $this->badSlot($i, 'malformed entry');
        }
        $cc = $kind === 0 && $i < self::INDEX_UNKNOWN_SLOT ? chr(65 + intdiv($i, 26)) . chr(65 + $i % 26) : self::UNKNOWN;
        $degraded = $e['degraded'];
        if (($this->stale || microtime(true) - $this->syncedAt > $this->maxAge) && !in_array('stale-table', $degraded, true)) {
            $degraded[] = 'stale-table';
        }
        if ($cands === []) {
            throw new NoRouteException($cc, $degraded, $this->revision, $this->epoch);
        }
        $pick = $key !== null && $key !== '' && ($e['affinity'] ?? '') !== 'random'
            ? self::pickSticky($cands, $key) : self::pickRandom($cands);
        $c = $pick >= 0 ? $cands[$pick] : null;
        if ($c === null || !is_string($c['host'] ?? null) || !is_array($c['attrs'] ?? null)) {
            throw $this->badSlot($i, 'malformed candidate');
        }
        return [
            'country' => $cc,
            'route' => $e['route'],
            'pool' => $c['pool'],
            'host' => $c['host'],
            'attrs' => $c['attrs'],
            'revision' => $this->revision,
            'epoch' => $this->epoch,
            'fallback_depth' => $e['fallback_depth'],
            'degraded' => $degraded,
        ];
    }

    /**
     * The slot of a raw country header: ASCII spaces trimmed, two ASCII
     * letters (any case) give 0..675, anything else the _unknown slot.
     */
    private static function slotOf(string $raw): int
    {
        $s = trim($raw, " \t\r\n");
        if (strlen($s) !== 2 || strspn($s, self::LETTERS) !== 2) {
            return self::INDEX_UNKNOWN_SLOT;
        }
        return ((ord($s[0]) | 0x20) - 97) * 26 + ((ord($s[1]) | 0x20) - 97);
    }

    private function badSlot(int $i, string $what): TableException
    {
        // The country, which an operator knows, beside the slot.
        $cc = $i === self::INDEX_UNKNOWN_SLOT ? self::UNKNOWN : chr(65 + intdiv($i, 26)) . chr(65 + $i % 26);
        return new TableException("regiond: snapshot index {$this->path}: slot {$i} ({$cc}): {$what}");
    }

    /**
     * Slot $i of the index: the entry's offset and length, and its kind.
     *
     * @return array{o: int, n: int, k: int}
     * @throws TableException
     */
    private function slot(int $i): array
    {
        $at = $this->slots + 12 * $i;
        $b = $this->head;
        if ($at + 12 > strlen($b)) { // a header too long for load()'s read
            if (fseek($this->fh, $at) !== 0 || strlen($b = (string) fread($this->fh, 12)) !== 12) {
                throw $this->badSlot($i, 'cannot read the slot');
            }
            $at = 0;
        }
        return unpack('Vo/Vn/Vk', $b, $at);
    }

    /**
     * The table's key for a raw country header: trimmed, upper-cased, and
     * an ISO 3166-1 alpha-2 code the table knows, otherwise "_unknown".
     */
    public function normalizeCountry(string $raw): string
    {
        if ($this->fh !== null) {
            $i = self::slotOf($raw);
            return $this->slot($i)['k'] === 0 && $i < self::INDEX_UNKNOWN_SLOT ? chr(65 + intdiv($i, 26)) . chr(65 + $i % 26) : self::UNKNOWN;
        }
        $s = trim($raw, " \t\r\n");
        if (strlen($s) !== 2 || strspn($s, self::LETTERS) !== 2) {
            return self::UNKNOWN;
        }
        $s = strtr($s, 'abcdefghijklmnopqrstuvwxyz', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ');
        return isset($this->data['effective'][$s]) ? $s : self::UNKNOWN;
    }

    /**
     * The table's etcd revision: an int, or on 32-bit PHP past 2^31 a whole
     * float (exact up to 2^53; see wholeNumber).
     */
    public function revision(): int|float
    {
        return $this->revision;
    }

    /** The table's config epoch: an int, or a whole float as revision(). */
    public function epoch(): int|float
    {
        return $this->epoch;
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
        return $this->stale || $this->syncAgeSeconds() > $this->maxAge;
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
        if (PHP_INT_SIZE >= 8) {
            // The digest as a big-endian uint64 in a signed int; the mask
            // makes the arithmetic shift a logical one.
            return (unpack('J', hash('xxh64', $key . "\0" . $pool, true))[1] >> 11) & 0x1FFFFFFFFFFFFF;
        }
        $hex = hash('xxh64', $key . "\0" . $pool);
        // top 28 bits * 2^25 + (next 28 bits >> 3) = h >> 11
        return (float) (hexdec(substr($hex, 0, 7)) * 33554432 + (hexdec(substr($hex, 7, 7)) >> 3));
    }

    /**
     * The rendezvous score of $pool for $key (docs/resolution.md):
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
     * -1 when a candidate has no integer weight or no pool id (an index
     * entry is checked here, as far as the pick reads it).
     *
     * @param list<array{pool: string, host: string, weight: int}> $cands
     */
    private static function pickSticky(array $cands, string $key): int
    {
        $best = -1;
        $bestScore = 0.0;
        $key .= "\0";
        foreach ($cands as $i => $c) {
            $w = $c['weight'] ?? null;
            if (!is_int($w) || !is_string($c['pool'] ?? null)) {
                return -1;
            }
            if ($w <= 0) {
                continue;
            }
            // stickyScore, inlined: this runs per candidate per request.
            $h = PHP_INT_SIZE >= 8
                ? (unpack('J', hash('xxh64', $key . $c['pool'], true))[1] >> 11) & 0x1FFFFFFFFFFFFF
                : self::stickyHash53(substr($key, 0, -1), $c['pool']);
            $s = -log(($h + 0.5) / self::TWO_POW_53) / $w;
            if ($best < 0 || $s < $bestScore || ($s === $bestScore && strcmp($c['pool'], $cands[$best]['pool']) < 0)) {
                $best = $i;
                $bestScore = $s;
            }
        }
        return max($best, 0);
    }

    /**
     * Index of a candidate drawn by weight (the first when every weight is
     * 0); -1 as pickSticky's.
     *
     * @param list<array{pool: string, host: string, weight: int}> $cands
     */
    private static function pickRandom(array $cands): int
    {
        $total = 0;
        foreach ($cands as $c) {
            $w = $c['weight'] ?? null;
            if (!is_int($w) || !is_string($c['pool'] ?? null)) {
                return -1;
            }
            $total += max($w, 0);
        }
        if (!is_int($total)) { // weights past PHP_INT_MAX in sum: not an index the agent writes
            return -1;
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
     * Reads and parses the file open as $fh (fstat $st), or keeps $prev's
     * parse when the bytes are unchanged. An entry is "racy" while its
     * mtime is within 2 s of the read: file times have 1 s resolution here,
     * so a rewrite in the same second (same inode, same size) would not
     * change the signature; a racy entry is re-read on every load until it
     * is old enough.
     *
     * @param resource $fh
     * @param array<int|string, int> $st
     * @param array{sig: string, digest: string, racy: bool, data: array<string, mixed>, written_at: float, synced_at: float}|null $prev
     * @return array{sig: string, digest: string, racy: bool, data: array<string, mixed>, written_at: float, synced_at: float}
     */
    private static function read(string $path, $fh, array $st, ?array $prev): array
    {
        $raw = stream_get_contents($fh);
        if ($raw === false) {
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
            if (self::wholeNumber($d[$k] ?? null) === null) {
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
        // synced_at absent, null or "" is none (an older agent's file):
        // staleness counts from written_at, as the Go reader
        // (routing.LoadTableJSONHeader) and the index's header take it.
        $syncedAt = $writtenAt;
        if (($d['synced_at'] ?? '') !== '') {
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
                || !is_array($e['candidates'] ?? null) || !array_is_list($e['candidates']) || !is_array($e['degraded'] ?? [])
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

    /**
     * A revision or epoch as json_decode gives it, or null when it is none:
     * an int, or, where ints are 32-bit (PHP_INT_SIZE 4), a whole float past
     * PHP_INT_MAX and at most 2^53, which json_decode gives for an integer
     * too large for an int and which holds it exactly. etcd's revision is
     * the cluster's count of writes: a busy etcd passes 2^31. Where ints are
     * 64-bit no float passes ($intMax, PHP_INT_MAX, is past 2^53).
     */
    private static function wholeNumber(mixed $v, int $intMax = PHP_INT_MAX): int|float|null
    {
        if (is_int($v)) {
            return $v;
        }
        if (is_float($v) && $v > $intMax && $v <= 9007199254740992.0 && floor($v) === $v) {
            return $v;
        }
        return null;
    }

    /**
     * RFC 3339 (Go's RFC3339Nano) to Unix seconds, or null: also for a
     * month, day, hour, minute or second out of range ("2026-02-31",
     * "25:00", "10:00:60"), or an offset past Go's (hour 24, minute 60),
     * which Go's time.Parse refuses, so that the reader refuses the files
     * the Go reader refuses (the day count would take them as another
     * instant); and for a lower-case "t" or "z" or a trailing newline,
     * which Go refuses too. Like Go it reads an hour of one digit
     * ("T8:00:00Z") and a comma before the fraction ("00,5Z").
     */
    private static function parseTime(string $s): ?float
    {
        // The agent's form, UTC with a fraction ("2026-12-02T10:00:00.123Z"),
        // without a regular expression: this runs on every request.
        $n = strlen($s);
        if (
            $n >= 22 && $n <= 30 && $s[4] === '-' && $s[7] === '-' && $s[10] === 'T' && $s[13] === ':' && $s[16] === ':'
            && $s[19] === '.' && $s[$n - 1] === 'Z' && strspn($s, '0123456789', 20, $n - 21) === $n - 21
            && strspn($s, '0123456789', 0, 4) === 4 && strspn($s, '0123456789', 5, 2) === 2 && strspn($s, '0123456789', 8, 2) === 2
            && strspn($s, '0123456789', 11, 2) === 2 && strspn($s, '0123456789', 14, 2) === 2 && strspn($s, '0123456789', 17, 2) === 2
        ) {
            [$y, $m, $d] = [(int) substr($s, 0, 4), (int) substr($s, 5, 2), (int) substr($s, 8, 2)];
            [$hh, $mm, $ss] = [(int) substr($s, 11, 2), (int) substr($s, 14, 2), (int) substr($s, 17, 2)];
            $frac = (float) ('0' . substr($s, 19, $n - 20));
            $off = 0;
        } else {
            // As Go's time.Parse reads RFC3339Nano: upper-case T and Z
            // only, nothing after (D: no "\n"), and also an hour of one
            // digit and a comma before the fraction.
            $re = '/^(\d{4})-(\d{2})-(\d{2})T(\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d+))?(?:Z|([+-])(\d{2}):(\d{2}))$/D';
            if (!preg_match($re, $s, $g)) {
                return null;
            }
            [$y, $m, $d, $hh, $mm, $ss] = [(int) $g[1], (int) $g[2], (int) $g[3], (int) $g[4], (int) $g[5], (int) $g[6]];
            $frac = (float) ('0.' . ($g[7] ?? ''));
            $off = 0;
            if (($g[8] ?? '') !== '') {
                if ((int) $g[9] > 24 || (int) $g[10] > 60) {
                    return null;
                }
                $off = ((int) $g[9] * 3600 + (int) $g[10] * 60) * ($g[8] === '+' ? -1 : 1);
            }
        }
        // checkdate wants a year from 1: + 400 keeps the leap years.
        if (!checkdate($m, $d, $y + 400) || $hh > 23 || $mm > 59 || $ss > 59) {
            return null;
        }
        // Days from the civil date (H. Hinnant's days_from_civil), not
        // gmmktime: a quarter of the cost in a cold php-fpm request, and
        // no two-digit years (gmmktime takes year 69 for 2069).
        $y -= $m <= 2 ? 1 : 0;
        $era = intdiv($y >= 0 ? $y : $y - 399, 400);
        $yoe = $y - $era * 400;
        $doe = $yoe * 365 + intdiv($yoe, 4) - intdiv($yoe, 100) + intdiv(153 * ($m > 2 ? $m - 3 : $m + 9) + 2, 5) + $d - 1;
        $days = $era * 146097 + $doe - 719468;
        return $days * 86400 + $hh * 3600 + $mm * 60 + $ss + $off + $frac;
    }
}
