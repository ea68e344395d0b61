// The tests' error measures, one place: absolute (flat values or rows of them), normalized and relative.

/** max |a − b| over two equally long arrays (a NaN on either side counts as Infinity). */
export function maxAbsDiffFlat(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`lengths differ: ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= m)) m = Number.isNaN(d) ? Infinity : d;
  }
  return m;
}

/** max |a − b| over all rows and ids (null in b = underflowed probability: skipped when a is also < −80). */
export function maxAbsDiff(a: readonly ArrayLike<number>[], b: readonly ArrayLike<number | null>[]): number {
  if (a.length !== b.length) throw new Error(`row counts differ: ${a.length} vs ${b.length}`);
  let m = 0;
  a.forEach((row, i) => {
    const other = b[i];
    if (row.length !== other.length) throw new Error(`row ${i}: lengths differ: ${row.length} vs ${other.length}`);
    for (let v = 0; v < row.length; v++) {
      const y = other[v];
      if (y === null || y === undefined) {
        if (row[v] > -80) m = Math.max(m, Infinity);
        continue;
      }
      const d = Math.abs(row[v] - y);
      if (!(d <= m)) m = Number.isNaN(d) ? Infinity : d;
    }
  });
  return m;
}

/** max |a − b| / max(1, max |b|) over the first n values (a NaN in a counts as Infinity) */
export function relErr(a: ArrayLike<number>, b: ArrayLike<number>, n = b.length): number {
  let d = 0;
  let m = 1;
  for (let i = 0; i < n; i++) {
    d = Math.max(d, Math.abs(a[i] - b[i]));
    if (Number.isNaN(a[i])) d = Infinity;
    m = Math.max(m, Math.abs(b[i]));
  }
  return d / m;
}

/** largest |a − b| / |b| (0 where equal, NaN where both are; Infinity where only one is NaN) */
export function maxRel(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < b.length; i++) {
    const [x, y] = [a[i], b[i]];
    if (Number.isNaN(x) || Number.isNaN(y)) {
      if (Number.isNaN(x) !== Number.isNaN(y)) worst = Infinity;
    } else if (x !== y) worst = Math.max(worst, Math.abs(x - y) / Math.abs(y));
  }
  return worst;
}
