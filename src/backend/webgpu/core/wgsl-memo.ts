/**
 * WGSL generators memoized: the source for equal arguments is built once and handed out as the same string. A step
 * encoded from scratch (a new step shape: a server's mixed batches, a first decode step) otherwise rebuilt every
 * kernel's source for every dispatch — about 3 ms a layer of v2-lite on this project's CPU machines — and hashed
 * each new copy when looking up its pipeline (V8 keeps a string's hash on the string, so a reused one hashes once).
 */
import { LatentError } from "../../../util/errors.js";

/** `gen` with its results cached by its arguments (numbers, strings, booleans, undefined, arrays and plain objects). */
export function memoWGSL<A extends readonly unknown[]>(gen: (...args: A) => string): (...args: A) => string {
  const cache = new Map<string, string>();
  return (...args: A): string => {
    const key = JSON.stringify(args, argument);
    let code = cache.get(key);
    if (code === undefined) {
      code = gen(...args);
      if (cache.size >= 4096) cache.clear();
      cache.set(key, code);
    }
    return code;
  };
}

/** JSON.stringify replacer: undefined kept apart from null and from a missing key; anything but data refused. */
function argument(this: unknown, _key: string, value: unknown): unknown {
  if (value === undefined) return "\u0000undefined";
  if (typeof value === "function" || typeof value === "symbol" || typeof value === "bigint")
    throw new LatentError(`memoWGSL: a ${typeof value} argument has no key`);
  return value;
}
