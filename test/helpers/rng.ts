// Reproducible randomness for the fuzzers: iteration i of a run depends only on (seed, i).

export function envInt(name: string, fallback: number): number {
  const v = process.env[name];
  if (v === undefined || v === "") return fallback;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${name}=${v} is not a non-negative integer`);
  return n;
}

/** sfc32: small, fast, good enough; seeded from (seed, iteration) so every iteration is reproducible on its own. */
export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;
  constructor(seed: number, stream: number) {
    this.a = seed >>> 0;
    this.b = Math.floor(seed / 2 ** 32) >>> 0;
    this.c = stream >>> 0;
    this.d = 0x9e3779b9 ^ Math.floor(stream / 2 ** 32);
    for (let i = 0; i < 16; i++) this.next();
  }
  next(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }
  /** integer in [0, n) */
  int(n: number): number {
    return n <= 0 ? 0 : Math.floor((this.next() / 2 ** 32) * n);
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!;
  }
  chance(p: number): boolean {
    return this.next() / 2 ** 32 < p;
  }
}
