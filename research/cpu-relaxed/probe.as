// Both relaxed integer dots on one fixed input (probe.mjs checks them against exact sums).
export function probe(a: usize, b: usize, c: usize, out: usize): void {
  v128.store(out, i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(a), v128.load(b)));
  v128.store(out + 16, i32x4.relaxed_dot_i8x16_i7x16_add_s(v128.load(a), v128.load(b), v128.load(c)));
}
