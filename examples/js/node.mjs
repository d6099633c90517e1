// The Node reader of the agent's snapshot index (table.idx): each call opens
// the file once, reads the header, its country's slot and entry from that one
// descriptor with positioned reads, and closes it, so a decision never mixes
// two tables and always uses the file the agent renamed in last.
//
//     import { decideFromIndexFile } from './node.mjs';
//     const d = decideFromIndexFile('/dev/shm/regiond/table.idx', req.headers['cf-ipcountry'], viewerId);

import { openSync, readSync, closeSync, fstatSync, statSync, constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { countrySlot, decideEntry, NoRouteError, readIndexEntry, readIndexEntryAsync, TableError } from './regiond.mjs';

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
  return readIndexFileStat(path, country, owner).read;
}

/** readIndexFile, and the stats of the file read. */
function readIndexFileStat(path, country, owner) {
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
    const read = readIndexEntry((off, len) => {
      const b = Buffer.allocUnsafe(inFile(st, off, len));
      return b.subarray(0, readSync(fd, b, 0, b.length, off));
    }, path, country);
    return { read, st };
  } finally {
    closeSync(fd);
  }
}

/** The identity of a file by its stats: another file, or this one changed, has another. */
function fileSignature(st) {
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
}

/**
 * IndexReader decides from the index file at path as decideFromIndexFile
 * does, reading each country's entry once per file: a call stats the path
 * (one system call) and answers from memory while the path names the same
 * file (device, inode, size, modification and change times), so the agent
 * renaming a new file in, or anyone changing this one, drops what was
 * read. It keeps at most one entry per slot of the file. opts.owner, as
 * decideFromIndexFile's, is checked on every call. decideFromIndexFile is
 * the reference it is tested against (TestDecisionsMatchGo).
 *
 *     const reader = new IndexReader('/run/regiond/table.idx', { owner: 998 });
 *     const d = reader.decide(req.headers['cf-ipcountry'], viewerId);
 */
export class IndexReader {
  constructor(path, opts = {}) {
    this.path = path;
    this.owner = opts.owner;
    this.sig = '';
    this.entries = new Map(); // slot → {header, country, entry} of the file of sig
  }

  /** The {header, country, entry} of a raw country header (see readIndexFile). */
  read(country) {
    let st;
    try {
      st = statSync(this.path);
    } catch (err) {
      throw new TableError(`regiond: stat index ${this.path}: ${err.message}`, { cause: err });
    }
    const why = this.owner !== undefined && this.owner !== null ? untrusted(st, this.owner) : notRegular(st);
    if (why) throw new TableError(`regiond: snapshot index ${this.path} ${why}: refusing a table the agent may not have written`);
    const sig = fileSignature(st);
    if (sig !== this.sig) {
      this.sig = sig;
      this.entries.clear();
    }
    const slot = countrySlot(country);
    let r = this.entries.get(slot);
    if (r === undefined) {
      // The file opened may be newer than the one just stated: it is kept
      // under its own signature.
      const got = readIndexFileStat(this.path, country, this.owner);
      const fsig = fileSignature(got.st);
      if (fsig !== this.sig) {
        this.sig = fsig;
        this.entries.clear();
      }
      r = got.read;
      this.entries.set(slot, r);
    }
    return r;
  }

  /**
   * decideFromIndexFile's decision for a raw country header and sticky
   * key; its attrs and degraded (a NoRouteError's reasons) are the
   * caller's own, not the cache's. opts as decideFromIndexFile's; an owner
   * other than the reader's throws a TypeError.
   */
  decide(country, key, opts) {
    // The owner is the reader's: one given here would otherwise be
    // ignored, and the check with it.
    if (opts?.owner !== undefined && opts.owner !== this.owner) {
      throw new TypeError(`regiond: IndexReader.decide: owner ${JSON.stringify(opts.owner)} differs from the reader's ${JSON.stringify(this.owner)}: give it to new IndexReader(path, { owner })`);
    }
    const { header, country: cc, entry } = this.read(country);
    let d;
    try {
      d = decideEntry(header, cc, entry, key, opts);
    } catch (err) {
      if (err instanceof NoRouteError) err.reasons = [...err.reasons];
      throw err;
    }
    d.attrs = { ...d.attrs };
    d.degraded = [...d.degraded];
    return d;
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
