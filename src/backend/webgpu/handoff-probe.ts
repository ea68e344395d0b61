/// <reference types="@webgpu/types" />
/**
 * Probe of the batch-1 step's structure (kernel-bench --handoff): what its dependent dispatch boundaries cost, against
 * handing each phase's output to the next phase inside one dispatch.
 *
 * A "step" here is v2-lite's batch-1 decode reduced to its skeleton: 188 phases in the order of the real step (per
 * layer A0, attention, o, router ∥ shared gate·up, routing ∥ shared down, routed gate·up, routed down; the dense
 * layer's five; the output head), each reading its weight bytes once with copy-like loads (8 vec4u a thread, all
 * issued before the input is awaited) and needing the whole 2048-word output of the phase before it, as a product
 * needs all of x. Each phase's workgroups write their share of its output. With `arith`, each phase also decodes its
 * bytes as 4-bit values into a dot product with x (phaseWGSL): a lower bound of the step's arithmetic beside its
 * structure.
 *
 * Phases are grouped into dispatches of `group` consecutive phases. Inside a dispatch, a phase's workgroups come after
 * its producer's in the grid; each waits for the producer's completion count (one invocation polls an atomic), then
 * reads the vector through atomic loads, polling any word still holding the sentinel the step's first fill wrote.
 * That makes the hand-off independent of ordering between the producer's stores and its count (WGSL's atomics are
 * relaxed). Progress relies on a GPU starting workgroups in grid order (a waiting workgroup's producers then have all
 * started); WebGPU does not promise that, so every poll is bounded and a timeout raises a flag the check reads.
 *
 * The skeleton's `check` runs one step of a grouping and compares the last phase's output with the same recurrence in
 * JavaScript. Results: BENCHMARKS.md, WebGPU round 18.
 */
import type { GpuRuntime } from "./runtime.js";

const WG = 256;
/** words of the handed-off vector (v2-lite's hidden size) */
const VEC = 2048;
/** 8 vec4u loads a thread */
const WG_VEC4 = WG * 8;
const SENT = 0xffffffff;
/** the error word's index in the counters buffer (after one counter per phase) */
const errIndex = (phases: number): number => phases;

/**
 * Weight bytes of each phase of a v2-lite Q4_K_M batch-1 step (approximate: Q4_K 0.5625 bytes a weight, Q6_K 0.82,
 * Q5_0 0.6875; 1.56 GB in all against the bench's 1.611 GB of active weights). `fewest`: the fewest dependent phases
 * the model allows without recomputation — six a MoE layer, the routing and the shared experts' down product inside
 * the routed gate·up's phase — instead of the step's seven.
 */
export function v2LitePhaseBytes(fewest = false): number[] {
  const q4k = 144 / 256;
  const q6k = 210 / 256;
  const attnLayer = [3648 * 2048 * q4k, 2 * 16 * 128 * 512 * 0.72, 2048 * 2048 * q4k];
  const dense = [...attnLayer, 2 * 10944 * 2048 * q4k, 2048 * 10944 * q6k];
  const [router, sharedDown, routedGateUp, routedDown] = [64 * 2048 * 4 + 2 * 2816 * 2048 * q4k, 2048 * 2816 * 0.7, 6 * 2 * 1408 * 2048 * q4k, 6 * 2048 * 1408 * 0.74];
  const moe = fewest ? [...attnLayer, router, sharedDown + routedGateUp, routedDown] : [...attnLayer, router, sharedDown, routedGateUp, routedDown];
  const head = 102400 * 2048 * q6k;
  return [...dense, ...Array.from({ length: 26 }, () => moe).flat(), head].map(Math.round);
}

/**
 * A phase's kernel. `chained`: the input may be made in the same dispatch (atomic loads, polled as the header says);
 * otherwise the input and output are plain loads and stores (the previous dispatch has finished). `arith`: the weights
 * also go through the least arithmetic an exact product of 4-bit weights does per weight — each value shifted, masked
 * into a float's mantissa and multiplied into a sum with x read from workgroup memory (the wide kernel's Q4_K `sums`
 * decoding without its block scales), 24 values a 16 bytes — x being the input's words as floats, staged before the
 * phase's one barrier. That is less arithmetic than the step's products do: a lower bound.
 */
export function phaseWGSL(chained: boolean, arith: boolean): string {
  const load = (o: string): string => (chained ? `atomicLoad(&V[${o}])` : `V[${o}]`);
  // weight vec4u i of this thread: components x, y, z (24 nibbles of its 32) each against two vec4s of x. 24 values a
  // 16 bytes is fewer than a v2-lite Q4_K_M step holds (2.45 G weights in its 1.56 GB: 25 a 16 bytes; Q4_K alone 28)
  const dots = Array.from({ length: 8 }, (_, i) =>
    Array.from({ length: 3 }, (_, c) => {
      // neighbouring lanes on neighbouring vec4s (no bank conflicts, as the wide kernel's padded staging)
      const xv = (h: number): string => `XS[(li + ${37 * (8 * i + 2 * c + h)}u) % ${VEC / 4}u]`;
      const nib = (n: number): string => `bitcast<f32>((${n === 0 ? `f${i}.${"xyzw"[c]}` : `(f${i}.${"xyzw"[c]} >> ${4 * n}u)`} & 0xfu) | 0x4b000000u)`;
      return `{ let xa = ${xv(0)}; let xb = ${xv(1)}; acc += ${[0, 1, 2, 3].map((n) => `${nib(n)} * xa.${"xyzw"[n]}`).join(" + ")} + ${[4, 5, 6, 7].map((n) => `${nib(n)} * xb.${"xyzw"[n - 4]}`).join(" + ")}; }`;
    }).join(" "),
  ).join("\n  ");
  return /* wgsl */ `enable subgroups;
struct P { base: u32, gx: u32, count: u32, limit: u32 }
@group(0) @binding(0) var<storage, read> W: array<vec4u>;
// per phase: first vec4 of its weights, their count, its workgroups
@group(0) @binding(1) var<storage, read> T: array<vec4u>;
// per workgroup of the step: its phase, and its index in the phase (bit 31: the phase's input is made in this dispatch)
@group(0) @binding(2) var<storage, read> M: array<vec2u>;
@group(0) @binding(3) var<storage, read_write> V: array<${chained ? "atomic<u32>" : "u32"}>;
@group(0) @binding(4) var<storage, read_write> C: array<atomic<u32>>;
@group(0) @binding(5) var<uniform> p: P;
var<workgroup> red: array<u32, ${WG}>;
${arith ? `var<workgroup> XS: array<vec4f, ${VEC / 4}>;` : ""}
@compute @workgroup_size(${WG}) fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_invocation_id) sl: u32, @builtin(subgroup_size) ss: u32) {
  let g = wid.x + wid.y * p.gx;
  if (g >= p.count) { return; }
  // the error word follows the counters
  let err = arrayLength(&T);
  let m = M[p.base + g];
  let k = m.x;
  let j = m.y & 0x7fffffffu;
  let t = T[k];
  let w0 = t.x + j * ${WG_VEC4}u + li;
  let wl = t.x + t.y - 1u;
  ${Array.from({ length: 8 }, (_, i) => `let f${i} = W[min(w0 + ${i * WG}u, wl)];`).join(" ")}
  let f = ${Array.from({ length: 8 }, (_, i) => `f${i}`).join(" ^ ")};
  ${
    chained
      ? `if ((m.y >> 31u) == 1u && li == 0u) {
    let need = T[k - 1u].z;
    var n = 0u;
    loop {
      if (atomicLoad(&C[k - 1u]) >= need) { break; }
      n++;
      if (n >= p.limit) { atomicStore(&C[err], 1u); break; }
    }
  }
  workgroupBarrier();`
      : ""
  }
  // the whole input, its loads all issued before any is checked
  let x0 = k * ${VEC}u + li;
  ${Array.from({ length: VEC / WG }, (_, i) => `var v${i} = ${load(`x0 + ${i * WG}u`)};`).join(" ")}
  ${
    chained
      ? Array.from({ length: VEC / WG }, (_, i) => `{ var n = 0u; while (v${i} == ${SENT}u && n < p.limit) { v${i} = ${load(`x0 + ${i * WG}u`)}; n++; } }`).join("\n  ")
      : ""
  }
  var s = ${Array.from({ length: VEC / WG }, (_, i) => `v${i}`).join(" + ")};
  if (${Array.from({ length: VEC / WG }, (_, i) => `v${i} == ${SENT}u`).join(" || ")}) { atomicStore(&C[err], 2u); }
  let sg = subgroupAdd(s);
  if (sl == 0u) { red[li / ss] = sg; }
  ${arith ? `// x: this thread's words as floats, v4i..v4i+3 at XS[li + WG·i]
  ${Array.from({ length: VEC / WG / 4 }, (_, i) => `XS[li + ${i * WG}u] = vec4f(f32(v${4 * i} & 0xffffu), f32(v${4 * i + 1} & 0xffffu), f32(v${4 * i + 2} & 0xffffu), f32(v${4 * i + 3} & 0xffffu)) * ${1 / 65536};`).join(" ")}` : ""}
  workgroupBarrier();
  var total = 0u;
  for (var i = 0u; i < ${WG}u / ss; i++) { total += red[i]; }
  ${arith ? `var acc = 0.0;\n  ${dots}` : ""}
  // words j, j + w, j + 2w, … of the output, w the phase's workgroups
  for (var o = j + t.z * li; o < ${VEC}u; o += t.z * ${WG}u) {
    let x = ${load(`k * ${VEC}u + o`)};
    var y = ((total * 2654435761u) ^ (x + o * 40503u + k)) & 0x7fffffffu;
    if ((f.x ^ f.y ^ f.z ^ f.w) == 0x9e3779b9u${arith ? " || acc == 1.25e30" : ""}) { y ^= 1u; }
    ${chained ? `atomicStore(&V[(k + 1u) * ${VEC}u + o], y);` : `V[(k + 1u) * ${VEC}u + o] = y;`}
  }
  ${chained ? "workgroupBarrier();\n  if (li == 0u) { atomicAdd(&C[k], 1u); }" : ""}
}`;
}

/** A step's skeleton on the GPU: its buffers, and how to run it with phases grouped `group` to a dispatch. */
export interface HandoffSkeleton {
  readonly phases: number;
  readonly bytes: number;
  /** one step: the sentinel and count fills, then the phases `group` to a dispatch (chained inside each) */
  run(rt: GpuRuntime, group: number): void;
  /** the last phase's output and the error word after one step */
  check(rt: GpuRuntime, group: number): Promise<{ mismatches: number; error: number }>;
}

/**
 * `bytes` per phase (each rounded up to whole vec4s, at least one); `arith`: each phase also decodes its weights as
 * 4-bit values into a dot product with x (phaseWGSL); `limit` bounds every poll.
 */
export function handoffSkeleton(rt: GpuRuntime, phaseBytes: readonly number[], opts: { arith?: boolean; limit?: number } = {}): HandoffSkeleton {
  const limit = opts.limit ?? 1 << 22;
  const arith = opts.arith === true;
  const P = phaseBytes.length;
  const vec4s = phaseBytes.map((b) => Math.max(1, Math.ceil(b / 16)));
  const groupsOf = vec4s.map((v) => Math.ceil(v / WG_VEC4));
  const table = new Uint32Array(4 * P);
  let at = 0;
  for (let k = 0; k < P; k++) {
    table.set([at, vec4s[k]!, groupsOf[k]!, 0], 4 * k);
    at += vec4s[k]!;
  }
  const total = groupsOf.reduce((a, b) => a + b, 0);
  const w = rt.buffer(at * 16, "handoff weights");
  const t = rt.upload(table, "handoff phases");
  const m = rt.buffer(total * 8, "handoff map");
  const v = rt.buffer((P + 1) * VEC * 4, "handoff vectors");
  const c = rt.buffer((P + 1) * 4, "handoff counters");
  const input = Uint32Array.from({ length: VEC }, (_, i) => (Math.imul(i + 1, 2246822519) >>> 0) & 0x7fffffff);
  rt.write(v, 0, input);
  rt.write(c, 0, new Uint32Array(P + 1));
  // a grouping's dispatches of `group` phases, and its map: each workgroup's (phase, index | in-dispatch input)
  type Dispatch = { first: number; count: number; base: number };
  const groupings = new Map<number, { dispatches: Dispatch[]; words: Uint32Array }>();
  const groupingOf = (group: number): { dispatches: Dispatch[]; words: Uint32Array } => {
    const known = groupings.get(group);
    if (known !== undefined) return known;
    const words = new Uint32Array(2 * total);
    const dispatches: Dispatch[] = [];
    let base = 0;
    for (let first = 0; first < P; first += group) {
      const count = Math.min(group, P - first);
      dispatches.push({ first, count, base });
      for (let k = first; k < first + count; k++) {
        for (let j = 0; j < groupsOf[k]!; j++, base++) words.set([k, (j | (k > first ? 0x80000000 : 0)) >>> 0], 2 * base);
      }
    }
    const made = { dispatches, words };
    groupings.set(group, made);
    return made;
  };
  let mapped = -1;
  const maxG = rt.info.limits.maxComputeWorkgroupsPerDimension;
  const run = (r: GpuRuntime, group: number): void => {
    const { dispatches, words } = groupingOf(group);
    if (mapped !== group) {
      r.write(m, 0, words);
      mapped = group;
    }
    // every vector but the step's input back to the sentinel, every count to 0 (the error word kept)
    r.fillWords({ buffer: v, offset: VEC * 4, size: P * VEC * 4 }, SENT);
    r.fillWords({ buffer: c, offset: 0, size: P * 4 }, 0);
    for (const d of dispatches) {
      let n = 0;
      for (let k = d.first; k < d.first + d.count; k++) n += groupsOf[k]!;
      const gx = Math.min(n, maxG);
      r.dispatch("handoff", phaseWGSL(d.count > 1, arith), [w, t, m, v, c], new Uint32Array([d.base, gx, n, limit]), [gx, Math.ceil(n / gx)]);
    }
  };
  const expected = (): Uint32Array => {
    let x = input;
    for (let k = 0; k < P; k++) {
      let s = 0;
      for (const e of x) s += e;
      const sh = Math.imul(s >>> 0, 2654435761) >>> 0;
      x = Uint32Array.from(x, (e, o) => ((sh ^ ((e + o * 40503 + k) >>> 0)) & 0x7fffffff) >>> 0);
    }
    return x;
  };
  let want: Uint32Array | undefined;
  return {
    phases: P,
    bytes: at * 16,
    run,
    async check(r: GpuRuntime, group: number) {
      r.write(c, 4 * errIndex(P), new Uint32Array([0]));
      run(r, group);
      const got = new Uint32Array(await r.read(v));
      const error = new Uint32Array(await r.read(c))[errIndex(P)]!;
      want ??= expected();
      let mismatches = 0;
      for (let o = 0; o < VEC; o++) if (got[P * VEC + o] !== want[o]) mismatches++;
      return { mismatches, error };
    },
  };
}
