/**
 * The WebAssembly kernels' exports (src/backend/cpu/wasm/kernels.as) as the CPU backend calls them: byte offsets into
 * the arena's shared memory. The native kernels (native.ts) take the same arguments after the memory's base address.
 */
export interface KernelExports {
  typeClass(type: number): number;
  blockValues(type: number): number;
  scratchBytes(cols: number): number;
  quantize(cls: number, x: number, n: number, cols: number, xStride: number, aq: number, ad: number, as: number): void;
  matmul(
    type: number,
    w: number,
    rowBytes: number,
    r0: number,
    r1: number,
    cols: number,
    n: number,
    x: number,
    xStride: number,
    aq: number,
    ad: number,
    as: number,
    y: number,
    yStride: number,
    S: number,
    tc: number,
  ): void;
  repackQ6K(src: number, rows: number, cols: number, dst: number): void;
  unsignQ6KR(p: number, rows: number, cols: number): void;
  repackQ5_0u8(src: number, rows: number, cols: number, dst: number): void;
  gatherRows(src: number, rowBytes: number, idx: number, m: number, dst: number): void;
  swigluQuant(
    cls: number,
    g: number,
    u: number,
    r0: number,
    r1: number,
    F: number,
    aq: number,
    ad: number,
    as: number,
  ): void;
  addScaledRows(out: number, d: number, m: number, dim: number, idx: number, scale: number): void;
  matmulT(
    type: number,
    w: number,
    rowBytes: number,
    rows: number,
    cols: number,
    t0: number,
    t1: number,
    x: number,
    xStride: number,
    y: number,
    yStride: number,
    S: number,
  ): void;
  attnAbsorbed(
    C: number,
    K: number,
    T: number,
    L: number,
    R: number,
    qc: number,
    qp: number,
    h0: number,
    h1: number,
    scale: number,
    sc: number,
    out: number,
  ): void;
  attnPrefill(
    kNope: number,
    kPe: number,
    v: number,
    q: number,
    n: number,
    pos0: number,
    H: number,
    P: number,
    R: number,
    V: number,
    h0: number,
    h1: number,
    scale: number,
    sc: number,
    out: number,
  ): void;
}
