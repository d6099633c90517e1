// The Node reader of the agent's snapshot index (table.idx): each call opens
// the file once, reads the header, its country's slot and entry from that one
// descriptor with positioned reads, and closes it, so a decision never mixes
// two tables and always uses the file the agent renamed in last.
//
//     import { decideFromIndexFile } from './node.mjs';
//     const d = decideFromIndexFile('/dev/shm/regiond/table.idx', req.headers['cf-ipcountry'], viewerId);

import { openSync, readSync, closeSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { decideEntry, readIndexEntry, readIndexEntryAsync, TableError } from './regiond.mjs';

export * from './regiond.mjs';

/** Where the agent writes its index by default (beside table.json). */
export const DEFAULT_INDEX_PATH = '/dev/shm/regiond/table.idx';

/**
 * The decision for a raw country header and sticky key from the index file
 * at path, read synchronously (a few microseconds: see README.md).
 * Throws NoRouteError, or TableError for a missing or malformed file.
 */
export function decideFromIndexFile(path, country, key, opts) {
  const { header, country: cc, entry } = readIndexFile(path, country);
  return decideEntry(header, cc, entry, key, opts);
}

/**
 * The {header, country, entry} of a raw country header from the index file
 * at path (see readIndexEntry), read through one descriptor.
 */
export function readIndexFile(path, country) {
  let fd;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    throw new TableError(`regiond: open index ${path}: ${err.message}`, { cause: err });
  }
  try {
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
