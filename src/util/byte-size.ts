/**
 * Byte counts as users write them on the command line: a whole number of bytes, or with a binary suffix — K, M, G, T
 * (optionally followed by B or iB: 24G, 512MiB, 1.5G) — each a power of 1024.
 */
import { UsageError } from "./errors.js";

const POWERS: Readonly<Record<string, number>> = { "": 0, K: 1, M: 2, G: 3, T: 4 };

/** Bytes of `text` ("24G", "512M", "1000000"); a clear error naming `what` otherwise. */
export function parseByteSize(text: string, what = "a size"): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$/i.exec(text);
  if (m === null) throw new UsageError(`${what}: expected bytes such as 24G, 512M or 1000000, got '${text}'`);
  const bytes = Math.floor(Number(m[1]) * 1024 ** POWERS[m[2].toUpperCase()]);
  if (!(Number.isSafeInteger(bytes) && bytes > 0)) throw new UsageError(`${what}: '${text}' is not a positive size`);
  return bytes;
}

/** Bytes in binary units, as budgets are given (16G = 16 GiB): 1.5 GiB, 512.0 MiB (`digits` decimals). */
export function formatBinaryBytes(n: number, digits = 1): string {
  if (n >= 2 ** 30) return `${(n / 2 ** 30).toFixed(digits)} GiB`;
  if (n >= 2 ** 20) return `${(n / 2 ** 20).toFixed(digits)} MiB`;
  if (n >= 2 ** 10) return `${(n / 2 ** 10).toFixed(digits)} KiB`;
  return `${n} B`;
}

/** Bytes for people: 1.23 GB (decimal units, as file sizes are shown elsewhere in latent). */
export function formatBytes(n: number): string {
  if (n >= 1e12) return `${(n / 1e12).toFixed(2)} TB`;
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} GB`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} kB`;
  return `${n} B`;
}
