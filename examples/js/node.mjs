// The Node reader of the agent's snapshot index (table.idx): each call opens
// the file once, reads the header, its country's slot and entry from that one
// descriptor with positioned reads, and closes it, so a decision never mixes
// two tables and always uses the file the agent renamed in last. The file
// must be the agent's: owned by opts.owner (default 'regiond', the package's
// user) and writable by no one else.
//
//     import { decideFromIndexFile } from './node.mjs';
//     const d = decideFromIndexFile('/run/regiond/table.idx', req.headers['cf-ipcountry'], viewerId);

import { openSync, readSync, closeSync, fstatSync, statSync, readFileSync, constants } from 'node:fs';
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
 * The agent's user the readers check the index's owner against when
 * opts.owner is not given (undefined or null): the Debian package's, whose
 * unit runs the agent as user regiond.
 */
export const DEFAULT_OWNER = 'regiond';

/** File where user names are looked up (Node has no getpwnam). */
const PASSWD = '/etc/passwd';

/** Uids of owners given by name, for the process's life (a found name only). */
const uids = new Map();

/** What to pass instead of an owner that is not the agent's user. */
const OWNER_HINT = "name the user the agent runs as, { owner: 'USER' } or its uid ({ owner: 998 }; under `regiond dev` your own), " +
  "or { owner: '' } to read an index of any owner (unsafe where other local users could make the snapshot's directory first, as in /dev/shm)";

/**
 * The uid an owner option names, or null for '' (no check): undefined and
 * null are DEFAULT_OWNER; a non-negative integer, or a string of digits, a
 * uid; another string a user name, looked up in /etc/passwd once per
 * process. A name not found there (a user of a directory service, sssd or
 * LDAP; a container whose /etc/passwd lacks the host's users) or any other
 * value throws a TableError saying what to pass.
 */
export function ownerUid(owner) {
  owner ??= DEFAULT_OWNER;
  if (owner === '') return null;
  if (Number.isInteger(owner) && owner >= 0) return owner;
  if (typeof owner !== 'string') {
    let shown;
    try {
      shown = typeof owner === 'number' ? String(owner) : JSON.stringify(owner) ?? String(owner);
    } catch {
      shown = typeof owner; // a BigInt, a cyclic object
    }
    throw new TableError(`regiond: owner ${shown}: want the agent's user, a name or a non-negative integer uid; ${OWNER_HINT}`);
  }
  if (/^[0-9]+$/.test(owner)) return Number(owner);
  const known = uids.get(owner);
  if (known !== undefined) return known;
  const which = owner === DEFAULT_OWNER ? `owner '${owner}' (the default: the package's agent user)` : `owner '${owner}'`;
  let passwd;
  try {
    passwd = readFileSync(PASSWD, 'utf8');
  } catch (err) {
    throw new TableError(`regiond: ${which}: cannot look the user up (${err.message}); ${OWNER_HINT}`, { cause: err });
  }
  for (const line of passwd.split('\n')) {
    const f = line.split(':');
    if (f[0] === owner && f.length >= 3 && /^[0-9]+$/.test(f[2])) {
      const uid = Number(f[2]);
      uids.set(owner, uid);
      return uid;
    }
  }
  throw new TableError(`regiond: ${which}: no such user in ${PASSWD}; ${OWNER_HINT}`);
}

/**
 * The decision for a raw country header and sticky key from the index file
 * at path, read synchronously (tens of microseconds: see README.md).
 * opts.owner, the agent's user (a name or a uid; default 'regiond'),
 * refuses a file owned by anyone else or writable by group or others
 * (docs/snapshot-index.md, trust); '' reads a file of any owner (unsafe on
 * a shared host). Throws NoRouteError, or TableError for a missing,
 * malformed or refused file, or an owner that names no user.
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
 * Why a file with stats st is not the agent's (owner, as opts.owner: by
 * default 'regiond'), or '': it must be a regular file owned by that user
 * and writable by no one else; with owner '', any regular file is. The
 * reason ends the reader's message: it says the file is refused (and, for
 * another owner, what to pass). An owner that names no user throws a
 * TableError (ownerUid).
 */
export function untrusted(st, owner) {
  const uid = ownerUid(owner);
  const refusing = ': refusing a table the agent may not have written';
  const why = notRegular(st);
  if (why) return why + refusing;
  if (uid === null) return '';
  if (st.uid !== uid) {
    const o = owner ?? DEFAULT_OWNER;
    const name = typeof o === 'string' && !/^[0-9]+$/.test(o) ? ` (owner '${o}')` : '';
    return `is owned by uid ${st.uid}, not the agent's uid ${uid}${name}${refusing}; ${OWNER_HINT}`;
  }
  if ((st.mode & 0o022) !== 0) return `is writable by group or others (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})${refusing}`;
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
 * at path (see readIndexEntry), read through one descriptor; owner as
 * decideFromIndexFile's opts.owner (by default 'regiond').
 */
export function readIndexFile(path, country, owner) {
  return readIndexFileStat(path, country, owner).read;
}

/** readIndexFile, and the stats of the file read. */
function readIndexFileStat(path, country, owner) {
  ownerUid(owner); // an owner that names no user: before the open
  let fd;
  try {
    fd = openSync(path, OPEN_FLAGS);
  } catch (err) {
    throw new TableError(`regiond: open index ${path}: ${err.message}`, { cause: err });
  }
  try {
    const st = fstatSync(fd);
    const why = untrusted(st, owner);
    if (why) throw new TableError(`regiond: snapshot index ${path} ${why}`);
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
 * read. It keeps the file it read open (one descriptor; close() lets it
 * go), as docs/snapshot-index.md asks of a reader that keeps entries: an
 * inode number is free for a new file once the old one is closed and
 * unlinked (ext4 and xfs give it again within a few renames), and with
 * coarse file times (Linux before 6.13: a clock tick) a same-size table
 * renamed in within one tick would have matched the one remembered. It
 * keeps at most one entry per slot of the file. opts.owner, as
 * decideFromIndexFile's (by default 'regiond'), is checked on every call
 * (a name is looked up at the first). decideFromIndexFile is the reference
 * it is tested against (TestDecisionsMatchGo).
 *
 *     const reader = new IndexReader('/run/regiond/table.idx', { owner: 'regiond' });
 *     const d = reader.decide(req.headers['cf-ipcountry'], viewerId);
 */
export class IndexReader {
  constructor(path, opts = {}) {
    this.path = path;
    this.owner = opts.owner ?? DEFAULT_OWNER;
    this.fd = null; // the file the entries are of, kept open
    this.st = null;
    this.sig = '';
    this.entries = new Map(); // slot → {header, country, entry} of the file of sig
  }

  /** The {header, country, entry} of a raw country header (see readIndexFile). */
  read(country) {
    ownerUid(this.owner); // an owner that names no user: before the stat
    let st;
    try {
      st = statSync(this.path);
    } catch (err) {
      throw new TableError(`regiond: stat index ${this.path}: ${err.message}`, { cause: err });
    }
    const why = untrusted(st, this.owner);
    if (why) throw new TableError(`regiond: snapshot index ${this.path} ${why}`);
    if (this.fd === null || fileSignature(st) !== this.sig) this.#open();
    const slot = countrySlot(country);
    let r = this.entries.get(slot);
    if (r === undefined) {
      const { fd, st: fst } = this;
      r = readIndexEntry((off, len) => {
        const b = Buffer.allocUnsafe(inFile(fst, off, len));
        return b.subarray(0, readSync(fd, b, 0, b.length, off));
      }, this.path, country);
      this.entries.set(slot, r);
    }
    return r;
  }

  /**
   * Opens the file the path names now and forgets the entries of the one
   * held (closed once the new one is open: its inode number stays taken
   * until then). The file opened may be newer than the one just stated:
   * its entries are kept under its own signature.
   */
  #open() {
    let fd;
    try {
      fd = openSync(this.path, OPEN_FLAGS);
    } catch (err) {
      throw new TableError(`regiond: open index ${this.path}: ${err.message}`, { cause: err });
    }
    let st;
    try {
      st = fstatSync(fd);
      const why = untrusted(st, this.owner);
      if (why) throw new TableError(`regiond: snapshot index ${this.path} ${why}`);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
    this.close();
    this.fd = fd;
    this.st = st;
    this.sig = fileSignature(st);
  }

  /** Closes the file held and forgets its entries; the next call opens the path again. */
  close() {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
    this.st = null;
    this.sig = '';
    this.entries.clear();
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
    if (opts?.owner !== undefined && (opts.owner ?? DEFAULT_OWNER) !== this.owner) {
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
  ownerUid(opts?.owner); // an owner that names no user: before the open (a name's lookup is synchronous, once)
  let fh;
  try {
    fh = await open(path, OPEN_FLAGS);
  } catch (err) {
    throw new TableError(`regiond: open index ${path}: ${err.message}`, { cause: err });
  }
  try {
    const st = await fh.stat();
    const why = untrusted(st, opts?.owner);
    if (why) throw new TableError(`regiond: snapshot index ${path} ${why}`);
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
