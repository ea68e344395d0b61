import { GGUFError } from "../util/errors.js";
import { GGUFValueType, type GGUFArray, type GGUFMetadataEntry, type GGUFValue } from "./types.js";

function isArray(v: GGUFValue): v is GGUFArray {
  return typeof v === "object" && v !== null && "elementType" in v;
}

function toNumber(key: string, v: GGUFValue): number {
  if (typeof v === "number") return v;
  if (typeof v === "bigint") {
    if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER)) {
      throw new GGUFError(`metadata "${key}" = ${v} does not fit a safe integer`);
    }
    return Number(v);
  }
  throw new GGUFError(`metadata "${key}" should be a number, found ${describe(v)}`);
}

function describe(v: GGUFValue): string {
  if (isArray(v)) return `an array of ${v.values.length} ${GGUFValueType[v.elementType]}`;
  return `${typeof v} ${JSON.stringify(typeof v === "bigint" ? v.toString() : v)}`;
}

/** Typed, key-naming access to GGUF metadata. Any integer width is accepted where a number is asked for. */
export class Metadata {
  constructor(readonly entries: ReadonlyMap<string, GGUFMetadataEntry>) {}

  has(key: string): boolean {
    return this.entries.has(key);
  }

  keys(): string[] {
    return [...this.entries.keys()];
  }

  raw(key: string): GGUFValue | undefined {
    return this.entries.get(key)?.value;
  }

  number(key: string): number | undefined {
    const v = this.raw(key);
    return v === undefined ? undefined : toNumber(key, v);
  }

  requireNumber(key: string): number {
    const v = this.number(key);
    if (v === undefined) throw new GGUFError(`missing metadata key "${key}"`);
    return v;
  }

  /** A non-negative integer key (counts, lengths). */
  integer(key: string): number | undefined {
    const v = this.number(key);
    if (v !== undefined && (!Number.isInteger(v) || v < 0))
      throw new GGUFError(`metadata "${key}" = ${v} should be a non-negative integer`);
    return v;
  }

  requireInteger(key: string): number {
    const v = this.integer(key);
    if (v === undefined) throw new GGUFError(`missing metadata key "${key}"`);
    return v;
  }

  string(key: string): string | undefined {
    const v = this.raw(key);
    if (v === undefined) return undefined;
    if (typeof v !== "string") throw new GGUFError(`metadata "${key}" should be a string, found ${describe(v)}`);
    return v;
  }

  requireString(key: string): string {
    const v = this.string(key);
    if (v === undefined) throw new GGUFError(`missing metadata key "${key}"`);
    return v;
  }

  bool(key: string): boolean | undefined {
    const v = this.raw(key);
    if (v === undefined) return undefined;
    if (typeof v === "boolean") return v;
    if (typeof v === "number" && (v === 0 || v === 1)) return v === 1;
    throw new GGUFError(`metadata "${key}" should be a bool, found ${describe(v)}`);
  }

  array(key: string): GGUFArray | undefined {
    const v = this.raw(key);
    if (v === undefined) return undefined;
    if (!isArray(v)) throw new GGUFError(`metadata "${key}" should be an array, found ${describe(v)}`);
    return v;
  }

  stringArray(key: string): string[] | undefined {
    const a = this.array(key);
    if (a === undefined) return undefined;
    if (a.elementType !== GGUFValueType.STRING)
      throw new GGUFError(`metadata "${key}" should be an array of strings, found ${describe(a)}`);
    return a.values as string[];
  }

  numberArray(key: string): number[] | undefined {
    const a = this.array(key);
    if (a === undefined) return undefined;
    return Array.from(a.values as ArrayLike<GGUFValue>, (v, i) => toNumber(`${key}[${i}]`, v));
  }

  /** A key that may be a scalar or a per-layer array (llama.cpp allows both for head counts and FFN widths). */
  perLayer(key: string, nLayer: number): number[] | undefined {
    const v = this.raw(key);
    if (v === undefined) return undefined;
    if (isArray(v)) {
      const arr = this.numberArray(key)!;
      if (arr.length !== nLayer)
        throw new GGUFError(`metadata "${key}" has ${arr.length} entries, expected one per layer (${nLayer})`);
      return arr;
    }
    const n = toNumber(key, v);
    return new Array<number>(nLayer).fill(n);
  }
}

export { isArray as isGGUFArray };
