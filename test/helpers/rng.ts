// The tests' seeded randomness, one place: Rng for the fuzzers (iteration i of a run depends only on (seed, i)), and
// Mulberry32 for test data (uniforms, normals, integers) whose values the tests' tolerances were set on.

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
    return xs[this.int(xs.length)];
  }
  chance(p: number): boolean {
    return this.next() / 2 ** 32 < p;
  }
}

/** mulberry32: one 32-bit word of state; uniform draws in [0, 1), normals (Box–Muller), integers, typed arrays of normals. */
export class Mulberry32 {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  next(): number {
    let t = (this.s = (this.s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  normal(): number {
    const u = Math.max(1e-12, this.next());
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * this.next());
  }
  f64(n: number, scale = 1): Float64Array {
    return Float64Array.from({ length: n }, () => this.normal() * scale);
  }
  f32(n: number, scale = 1): Float32Array {
    return Float32Array.from({ length: n }, () => this.normal() * scale);
  }
  /** integer in [lo, hi) */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo));
  }
}

/** Mulberry32's uniform draws as a function. */
export function uniforms(seed: number): () => number {
  const r = new Mulberry32(seed);
  return () => r.next();
}
