// Helpers of the test drivers (driver.mjs, diff.mjs): hex-encoded
// inputs, a reader's outcome as the Go side compares it, and a Workers KV
// namespace in memory.

export const hex = (s) => Uint8Array.from(Buffer.from(s, 'hex'));
export const latin1 = (s) => Buffer.from(s, 'hex').toString('latin1'); // headers: one char per byte, as Node's http gives them

// failed is the outcome of a reader's error: a NoRouteError with its
// fields and 503 body, any other with its name and message.
export function failed(err) {
  if (err.name === 'NoRouteError') {
    const { country, reasons, revision, epoch } = err;
    return { ok: false, error: err.name, noroute: { country, reasons, revision, epoch }, body: err.toJSON(), message: err.message };
  }
  return { ok: false, error: err.name, message: err.message };
}

// outcome runs f: its decision, or its error as failed says.
export function outcome(f) {
  try {
    return { ok: true, d: f() };
  } catch (err) {
    return failed(err);
  }
}

// outcomeAsync is outcome of an async f.
export async function outcomeAsync(f) {
  try {
    return { ok: true, d: await f() };
  } catch (err) {
    return failed(err);
  }
}

// memoryKV is a Workers KV namespace in memory: values stored as strings,
// parsed on every get, as KV does.
export function memoryKV(pairs) {
  const m = new Map(pairs.map(({ key, value }) => [key, value]));
  return {
    async get(key, opts) {
      const v = m.get(key);
      if (v === undefined) return null;
      const type = typeof opts === 'string' ? opts : opts?.type ?? 'text';
      return type === 'json' ? JSON.parse(v) : v;
    },
  };
}
