// The Node reader of the agent's snapshot index (table.idx): each call opens
// the file once, reads the header, its country's slot and entry from that one
// descriptor with positioned reads, and closes it, so a decision never mixes
// two tables and always uses the file the agent renamed in last.
//
//     import { decideFromIndexFile } from './node.mjs';
//     const d = decideFromIndexFile('/dev/shm/regiond/table.idx', req.headers['cf-ipcountry'], viewerId);

import { openSync, readSync, closeSync, fstatSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { decideEntry, readIndexEntry, readIndexEntryAsync, TableError } from './regiond.mjs';

export * from './regiond.mjs';

/** Where the agent writes its index by default (beside table.json). */
export const DEFAULT_INDEX_PATH = '/dev/shm/regiond/table.idx';

/**
 * The decision for a raw country header and sticky key from the index file
 * at path, read synchronously (a few microseconds: see README.md).
 * opts.owner (the agent's uid: `id -u regiond`) refuses a file owned by
 * anyone else or writable by group or others (docs/snapshot-index.md,
 * trust). Throws NoRouteError, or TableError for a missing, malformed or
 * refused file.
 */
export function decideFromIndexFile(path, country, key, opts) {
  const { header, country: cc, entry } = readIndexFile(path, country, opts?.owner);
  return decideEntry(header, cc, entry, key, opts);
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
  if (st.uid !== owner) return `is owned by uid ${st.uid}, not the agent's uid ${owner}`;
  if ((st.mode & 0o022) !== 0) return `is writable by group or others (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})`;
  return '';
}

/**
 * The {header, country, entry} of a raw country header from the index file
 * at path (see readIndexEntry), read through one descriptor; owner, when
 * given, as decideFromIndexFile's opts.owner.
 */
export function readIndexFile(path, country, owner) {
  let fd;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    throw new TableError(`regiond: open index ${path}: ${err.message}`, { cause: err });
  }
  try {
    if (owner !== undefined && owner !== null) {
      const why = untrusted(fstatSync(fd), owner);
      if (why) throw new TableError(`regiond: snapshot index ${path} ${why}: refusing a table the agent may not have written`);
    }
    return readIndexEntry((off, len) => {
      const b = Buffer.allocUnsafe(len);
      return b.subarray(0, readSync(fd, b, 0, len, off));
    }, path, country);
  } finally {
    closeSync(fd);
  }
}

/** decideFromIndexFile with node:fs/promises (one FileHandle per call). */
export async function decideFromIndexFileAsync(path, country, key, opts) {
  let fh;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    throw new TableError(`regiond: open index ${path}: ${err.message}`, { cause: err });
  }
  try {
    if (opts?.owner !== undefined && opts?.owner !== null) {
      const why = untrusted(await fh.stat(), opts.owner);
      if (why) throw new TableError(`regiond: snapshot index ${path} ${why}: refusing a table the agent may not have written`);
    }
    const { header, country: cc, entry } = await readIndexEntryAsync(async (off, len) => {
      const b = Buffer.allocUnsafe(len);
      const { bytesRead } = await fh.read(b, 0, len, off);
      return b.subarray(0, bytesRead);
    }, path, country);
    return decideEntry(header, cc, entry, key, opts);
  } finally {
    await fh.close();
  }
}
