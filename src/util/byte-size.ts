/** Byte sizes as people write them on a command line: 24G, 512M, 1.5T, 80GiB, 1e9 (K/M/G/T are powers of 1024). */
import { UsageError } from "./errors.js";

const UNITS: Readonly<Record<string, number>> = { "": 1, K: 2 ** 10, M: 2 ** 20, G: 2 ** 30, T: 2 ** 40 };

/** `text` in bytes; a clear UsageError naming `what` for anything else (negative, empty, an unknown unit). */
export function parseByteSize(text: string, what: string): number {
  const m = /^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmgt]?)(?:i?b)?\s*$/i.exec(text);
  const value = m === null ? NaN : Number(m[1]) * UNITS[m[2].toUpperCase()];
  if (m === null || !Number.isFinite(value))
    throw new UsageError(`${what} must be a size such as 24G, 512M or 1.5T (bytes without a unit), got "${text}"`);
  return Math.floor(value);
}

/** Bytes for people: 1.23 GB (decimal units, as file sizes are shown elsewhere in latent). */
export function formatBytes(n: number): string {
  if (n >= 1e12) return `${(n / 1e12).toFixed(2)} TB`;
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} GB`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} kB`;
  return `${n} B`;
}
