// ggml tensor types are the quantizers' to define; the container names them by id.
export { allTypes, GGMLType, typeByName, typeName, typeTraits, type TypeTraits } from "../quant/types.js";

/** GGUF metadata value types. */
export enum GGUFValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

export type GGUFScalar = number | bigint | boolean | string;

/**
 * Values of a numeric array as read from a file: a typed array, as compact as in the file (a JS array would cost
 * 8–20 bytes per element: a hostile 64 MB array of bytes used to cost over 1 GB).
 */
export type GGUFNumberArrayValues =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | Float64Array;

/**
 * An array value keeps its element type so that a write reproduces the file byte for byte. Read from a file, arrays of
 * u8/i8/u16/i16/u32/i32/f32/f64 hold a typed array; other element types (and arrays built in code) a plain array.
 */
export interface GGUFArray {
  readonly elementType: GGUFValueType;
  readonly values: readonly (GGUFScalar | GGUFArray)[] | GGUFNumberArrayValues;
}

export type GGUFValue = GGUFScalar | GGUFArray;

export interface GGUFMetadataEntry {
  readonly type: GGUFValueType;
  readonly value: GGUFValue;
}

export const GGUF_MAGIC = 0x46554747;
export const GGUF_DEFAULT_ALIGNMENT = 32;
