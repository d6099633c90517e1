// The Node reader of the agent's snapshot index (table.idx): each call opens
// the file once, reads the header, its country's slot and entry from that one
// descriptor with positioned reads, and closes it, so a decision never mixes
// two tables and always uses the file the agent renamed in last.
//
//     import { decideFromIndexFile } from './node.mjs';
//     const d = decideFromIndexFile('/dev/shm/regiond/table.idx', req.headers['cf-ipcountry'], viewerId);

import { openSync, readSync, closeSync, fstatSync, constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { decideEntry, readIndexEntry, readIndexEntryAsync, TableError } from './regiond.mjs';

export * from './regiond.mjs';

// O_NONBLOCK: a FIFO in the file's place (another user's, in a directory
// they made first) opens at once instead of blocking the event loop until
// a writer comes; the fstat after the open then refuses it. A regular
// file's reads are the same with it.
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK;

/** Where the agent writes its index by default (beside table.json). */
export const DEFAULT_INDEX_PATH = '/dev/shm/regiond/table.idx';

/**
 * The decision for a raw country header and sticky key from the index file
 * at path, read synchronously (tens of microseconds: see README.md).
 * opts.owner (the agent's uid: `id -u regiond`) refuses a file owned by
 * anyone else or writable by group or others (docs/snapshot-index.md,
 * trust). Throws NoRouteError, or TableError for a missing, malformed or
 * refused file.
 */
export function decideFromIndexFile(path, country, key, opts) {
  const { header, country: cc, entry } = readIndexFile(path, country, opts?.owner);
  return decideEntry(header, cc, entry, key, opts);
}

/** Why a file with stats st is no table at all (a FIFO, a directory), or ''. */
function notRegular(st) {
  return st.isFile() ? '' : `is not a regular file (mode ${st.mode.toString(8).padStart(6, '0')})`;
}

/**
 * Why a file with stats st is not the agent's (uid owner), or '': it must
 * be owned by owner and writable by no one else. An owner that is not a
 * uid (a user name: Node cannot look one up) throws a TableError.
 */
export function untrusted(st, owner) {
  if (!Number.isInteger(owner) || owner < 0) {
    throw new TableError(`regiond: owner must be the agent's uid, a non-negative integer (id -u regiond), got ${JSON.stringify(owner)}`);
  }
  const why = notRegular(st);
  if (why) return why;
  if (st.uid !== owner) return `is owned by uid ${st.uid}, not the agent's uid ${owner}`;
  if ((st.mode & 0o022) !== 0) return `is writable by group or others (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})`;
  return '';
}

/**
 * How many of len bytes at off the file of stats st holds: a forged slot
 * length (up to 4 GiB) allocates no more than the file (it threw a
 * RangeError, or allocated gigabytes); the reader then finds the entry
 * short, a TableError.
 */
function inFile(st, off, len) {
  return Math.max(0, Math.min(len, st.size - off));
}

/**
 * The {header, country, entry} of a raw country header from the index file
 * at path (see readIndexEntry), read through one descriptor; owner, when
 * given, as decideFromIndexFile's opts.owner.
 */
export function readIndexFile(path, country, owner) {
  let fd;
  try {
    fd = openSync(path, OPEN_FLAGS);
  } catch (err) {
    throw new TableError(`regiond: open index ${path}: ${err.message}`, { cause: err });
  }
  try {
    const st = fstatSync(fd);
    const why = owner !== undefined && owner !== null ? untrusted(st, owner) : notRegular(st);
    if (why) throw new TableError(`regiond: snapshot index ${path} ${why}: refusing a table the agent may not have written`);
    return readIndexEntry((off, len) => {
      const b = Buffer.allocUnsafe(inFile(st, off, len));
      return b.subarray(0, readSync(fd, b, 0, b.length, off));
    }, path, country);
  } finally {
    closeSync(fd);
  }
}

/** decideFromIndexFile with node:fs/promises (one FileHandle per call). */
export async function decideFromIndexFileAsync(path, country, key, opts) {
  let fh;
  try {
    fh = await open(path, OPEN_FLAGS);
  } catch (err) {
    throw new TableError(`regiond: open index ${path}: ${err.message}`, { cause: err });
  }
  try {
    const st = await fh.stat();
    const why = opts?.owner !== undefined && opts?.owner !== null ? untrusted(st, opts.owner) : notRegular(st);
    if (why) throw new TableError(`regiond: snapshot index ${path} ${why}: refusing a table the agent may not have written`);
    const { header, country: cc, entry } = await readIndexEntryAsync(async (off, len) => {
      const b = Buffer.allocUnsafe(inFile(st, off, len));
      const { bytesRead } = await fh.read(b, 0, b.length, off);
      return b.subarray(0, bytesRead);
    }, path, country);
    return decideEntry(header, cc, entry, key, opts);
  } finally {
    await fh.close();
  }
}
