import { mkdtempSync, renameSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";

/**
 * Write a model (one file or its shards) so that its final names only ever hold complete files: `write` gets a path
 * with `out`'s file name inside a fresh hidden directory next to `out` (same filesystem, so the renames are atomic),
 * and the files it returns are renamed into place once it has finished. An interrupted or failed write leaves no file
 * under a final name, so nothing (a bench reusing its model, a loader) mistakes a partial file for a finished one.
 * Returns the final paths.
 */
export function writeThroughTemporary(out: string, write: (temporaryOut: string) => string[]): string[] {
  const dir = dirname(out);
  const staging = mkdtempSync(join(dir, `.${basename(out)}.partial-`));
  try {
    const written = write(join(staging, basename(out)));
    return written.map((p) => {
      const final = join(dir, basename(p));
      renameSync(p, final);
      return final;
    });
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}
