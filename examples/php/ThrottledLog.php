<?php
// error_log() at most once per window per distinct message, counting what
// it leaves out. A front door that fails every request (no snapshot, a
// permission error) would otherwise write one line per request: at 5,800
// requests/s, 13 MB of nginx error log in 5 s.
//
// PHP keeps nothing between requests under php-fpm (static variables and
// properties are reset after each one), so the count lives outside the
// request: in APCu when it is enabled (shared by the pool's children: one
// line per window for the whole pool), else in a small file per php-fpm
// child in a directory of the user's own under sys_get_temp_dir() (one line
// per window per child). When neither can be used (no APCu, and
// open_basedir excludes the temp directory, or the directory there is not
// this user's), one message in SAMPLE is logged.

declare(strict_types=1);

namespace Regiond;

final class ThrottledLog
{
    /** Default seconds between two lines of one message. */
    public const EVERY = 10;

    /** With no state to count in, one message in SAMPLE is logged. */
    public const SAMPLE = 100;

    /**
     * Logs $message with error_log() unless the same message was logged less
     * than $every seconds ago; then it is only counted, and the next line of
     * it says how many were left out. The first one is always logged at once.
     */
    public static function error(string $message, int $every = self::EVERY): void
    {
        $every = max(1, $every);
        $left = self::admit($message, $every);
        if ($left === null) {
            return;
        }
        $note = $left > 0
            ? " ({$left} more of this message not logged since the last line; at most one line per {$every} s)"
            : " (repeats within {$every} s are counted, not logged)";
        error_log($message . $note);
    }

    /**
     * Whether to log $message now: null = no (counted), else the number of
     * repeats left out since its last line.
     */
    private static function admit(string $message, int $every): ?int
    {
        $key = 'regiond-front-log:' . hash('xxh64', $message);
        if (function_exists('apcu_enabled') && apcu_enabled()) {
            $n = apcu_inc($key . ':n', 1, $ok); // every occurrence (created at 1 when missing)
            if ($ok && $n !== false) {
                if (!apcu_add($key . ':t', 1, $every)) {
                    return null; // a line of it within the window (this or another child's)
                }
                $last = apcu_fetch($key . ':last');
                apcu_store($key . ':last', $n);
                return is_int($last) && $n > $last ? $n - $last - 1 : 0;
            }
            // APCu full or failing: fall back to the file.
        }
        return self::admitFile($key, $every);
    }

    /** The per-process state file's variant of admit(). */
    private static function admitFile(string $key, int $every): ?int
    {
        $fh = self::stateFile();
        if ($fh === null) {
            // Nowhere to count that this user owns: log one in SAMPLE,
            // not every one (a flood is what this class prevents).
            return random_int(1, self::SAMPLE) === 1 ? 0 : null;
        }
        $state = json_decode((string) stream_get_contents($fh), true);
        $state = is_array($state) ? $state : [];
        $now = time();
        $e = $state[$key] ?? null;
        $e = is_array($e) && count($e) === 2 && is_int($e[0]) && is_int($e[1]) ? $e : null;
        $left = null;
        if ($e !== null && $now - $e[0] < $every && $now >= $e[0]) {
            $state[$key] = [$e[0], $e[1] + 1];
        } else {
            $left = $e[1] ?? 0;
            $state[$key] = [$now, 0];
            // Forget messages whose window is over with nothing left out,
            // and keep the file small whatever messages come.
            foreach ($state as $k => $v) {
                if ($k !== $key && (!is_array($v) || !is_int($v[0] ?? null) || ($now - $v[0] >= $every && ($v[1] ?? 0) === 0))) {
                    unset($state[$k]);
                }
            }
            if (count($state) > 64) {
                $state = [$key => $state[$key]];
            }
        }
        rewind($fh);
        ftruncate($fh, 0);
        fwrite($fh, json_encode($state));
        fclose($fh);
        return $left;
    }

    /**
     * Opens this process's state file for reading and writing, or returns
     * null: regiond-front-log.PID in a directory of this user's own,
     * sys_get_temp_dir()/regiond-front-log-EUID (0700, created if missing).
     * The directory must be a directory, not a link, owned by this user and
     * writable by no one else, so no other local user can plant or replace
     * the file in a shared /tmp; the file must then be a regular file of
     * this user's, with one link, not writable by others, the very file
     * opened. Without the posix extension (no euid to check), none.
     *
     * @return resource|null
     */
    private static function stateFile()
    {
        if (!function_exists('posix_geteuid')) {
            return null;
        }
        $uid = posix_geteuid();
        $dir = rtrim(sys_get_temp_dir(), '/') . '/regiond-front-log-' . $uid;
        $old = umask(0o077);
        try {
            @mkdir($dir, 0o700);
            clearstatcache(true, $dir);
            $d = @lstat($dir);
            if ($d === false || ($d['mode'] & 0o170000) !== 0o040000 || $d['uid'] !== $uid || ($d['mode'] & 0o077) !== 0) {
                return null;
            }
            $path = $dir . '/regiond-front-log.' . getmypid();
            $fh = @fopen($path, 'x+'); // O_CREAT|O_EXCL: never through a link
            if ($fh !== false) {
                return $fh;
            }
            $fh = @fopen($path, 'r+');
        } finally {
            umask($old);
        }
        if ($fh === false) {
            return null;
        }
        $st = fstat($fh);
        clearstatcache(true, $path);
        $lst = @lstat($path);
        if ($st === false || $lst === false || ($lst['mode'] & 0o170000) !== 0o100000 || $st['uid'] !== $uid
            || ($st['mode'] & 0o022) !== 0 || $st['dev'] !== $lst['dev'] || $st['ino'] !== $lst['ino'] || $st['nlink'] !== 1) {
            fclose($fh);
            return null;
        }
        return $fh;
    }
}
