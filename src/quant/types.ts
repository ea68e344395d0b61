/** ggml tensor types (GGUF `ggml_type` ids) and their block geometry. */
export enum GGMLType {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
}

export interface TypeTraits {
  readonly name: string;
  /** elements per block */
  readonly blockSize: number;
  /** bytes per block */
  readonly typeSize: number;
}

const TRAITS: ReadonlyMap<number, TypeTraits> = new Map<number, TypeTraits>([
  [GGMLType.F32, { name: "F32", blockSize: 1, typeSize: 4 }],
  [GGMLType.F16, { name: "F16", blockSize: 1, typeSize: 2 }],
  [GGMLType.Q4_0, { name: "Q4_0", blockSize: 32, typeSize: 18 }],
  [GGMLType.Q4_1, { name: "Q4_1", blockSize: 32, typeSize: 20 }],
  [GGMLType.Q5_0, { name: "Q5_0", blockSize: 32, typeSize: 22 }],
  [GGMLType.Q5_1, { name: "Q5_1", blockSize: 32, typeSize: 24 }],
  [GGMLType.Q8_0, { name: "Q8_0", blockSize: 32, typeSize: 34 }],
  [GGMLType.Q8_1, { name: "Q8_1", blockSize: 32, typeSize: 36 }],
  [GGMLType.Q2_K, { name: "Q2_K", blockSize: 256, typeSize: 84 }],
  [GGMLType.Q3_K, { name: "Q3_K", blockSize: 256, typeSize: 110 }],
  [GGMLType.Q4_K, { name: "Q4_K", blockSize: 256, typeSize: 144 }],
  [GGMLType.Q5_K, { name: "Q5_K", blockSize: 256, typeSize: 176 }],
  [GGMLType.Q6_K, { name: "Q6_K", blockSize: 256, typeSize: 210 }],
  [GGMLType.Q8_K, { name: "Q8_K", blockSize: 256, typeSize: 292 }],
  [GGMLType.IQ2_XXS, { name: "IQ2_XXS", blockSize: 256, typeSize: 66 }],
  [GGMLType.IQ2_XS, { name: "IQ2_XS", blockSize: 256, typeSize: 74 }],
  [GGMLType.IQ3_XXS, { name: "IQ3_XXS", blockSize: 256, typeSize: 98 }],
  [GGMLType.IQ1_S, { name: "IQ1_S", blockSize: 256, typeSize: 50 }],
  [GGMLType.IQ4_NL, { name: "IQ4_NL", blockSize: 32, typeSize: 18 }],
  [GGMLType.IQ3_S, { name: "IQ3_S", blockSize: 256, typeSize: 110 }],
  [GGMLType.IQ2_S, { name: "IQ2_S", blockSize: 256, typeSize: 82 }],
  [GGMLType.IQ4_XS, { name: "IQ4_XS", blockSize: 256, typeSize: 136 }],
  [GGMLType.I8, { name: "I8", blockSize: 1, typeSize: 1 }],
  [GGMLType.I16, { name: "I16", blockSize: 1, typeSize: 2 }],
  [GGMLType.I32, { name: "I32", blockSize: 1, typeSize: 4 }],
  [GGMLType.I64, { name: "I64", blockSize: 1, typeSize: 8 }],
  [GGMLType.F64, { name: "F64", blockSize: 1, typeSize: 8 }],
  [GGMLType.IQ1_M, { name: "IQ1_M", blockSize: 256, typeSize: 56 }],
  [GGMLType.BF16, { name: "BF16", blockSize: 1, typeSize: 2 }],
  [GGMLType.TQ1_0, { name: "TQ1_0", blockSize: 256, typeSize: 54 }],
  [GGMLType.TQ2_0, { name: "TQ2_0", blockSize: 256, typeSize: 66 }],
  [GGMLType.MXFP4, { name: "MXFP4", blockSize: 32, typeSize: 17 }],
]);

/** Block geometry of a type id, or undefined when the id is unknown. */
export function typeTraits(type: number): TypeTraits | undefined {
  return TRAITS.get(type);
}

export function typeName(type: number): string {
  return TRAITS.get(type)?.name ?? `unknown(${type})`;
}

export function typeByName(name: string): GGMLType | undefined {
  for (const [id, t] of TRAITS) if (t.name === name.toUpperCase()) return id as GGMLType;
  return undefined;
}

export function allTypes(): GGMLType[] {
  return [...TRAITS.keys()] as GGMLType[];
}
