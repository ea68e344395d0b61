/**
 * Several independent compute kernels as one WGSL module with one entry point (GpuRuntime.together): each kernel's
 * module-scope names get a prefix, its bindings follow the previous kernel's, its entry point becomes a plain function
 * of its builtins, and a new entry point hands every workgroup of the concatenated grids to its kernel, rebuilding
 * that kernel's own workgroup id. The text handling assumes the kernels' plain style (no nested generics in entry
 * parameters, literal workgroup sizes); anything else is reported as not combinable.
 */

/** Builtins the combined entry point can rebuild for a kernel. */
const BUILTINS = new Set([
  "workgroup_id",
  "num_workgroups",
  "global_invocation_id",
  "local_invocation_id",
  "local_invocation_index",
  "subgroup_invocation_id",
  "subgroup_size",
]);
/** Calls that need every invocation of the workgroup to take part (a kernel using them must run on all its threads). */
const WHOLE_GROUP = /\b(workgroupBarrier|storageBarrier|textureBarrier|workgroupUniformLoad|subgroup\w*|quad\w*)\b/;

interface StorageVar {
  readonly binding: number;
  readonly name: string;
  readonly access: "read" | "read_write";
  readonly type: string;
}

interface Item {
  readonly text: string;
  readonly kind: "directive" | "struct" | "fn" | "entry" | "var" | "other";
  /** the binding of a storage or uniform var */
  readonly binding?: number;
}

/** One kernel's module, parsed for combining. */
export interface ParsedKernel {
  readonly items: readonly Item[];
  readonly names: ReadonlySet<string>;
  readonly entryName: string;
  readonly entryBuiltins: readonly string[];
  /** storage vars by binding 0..k-1; the uniform parameter block is binding k */
  readonly storage: readonly StorageVar[];
  readonly workgroupSize: readonly [number, number, number];
  readonly wholeGroup: boolean;
  readonly workgroupBytes: number;
}

function stripComments(code: string): string {
  return code.replace(/\/\*[\s\S]*?\*\//g, " ").replace(/\/\/[^\n]*/g, "");
}

/** Module-scope items: up to a `;` or a closing `}` at brace depth 0. */
function splitItems(code: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < code.length; i++) {
    const ch = code[i];
    if (ch === "{") depth++;
    else if (ch === "}" && --depth === 0) {
      out.push(code.slice(start, i + 1).trim());
      start = i + 1;
    } else if (ch === ";" && depth === 0) {
      out.push(code.slice(start, i + 1).trim());
      start = i + 1;
    }
  }
  if (code.slice(start).trim() !== "") out.push(code.slice(start).trim());
  return out.filter((s) => s !== "" && s !== ";");
}

/** Bytes of a workgroup variable's type (each variable rounded up to 16, as Tint counts them); undefined: unknown. */
function typeBytes(t: string): number | undefined {
  t = t.trim();
  const arr = /^array<(.+),\s*(\d+)[ui]?\s*>$/.exec(t);
  if (arr !== null) {
    const el = typeBytes(arr[1]!);
    return el === undefined ? undefined : el * Number(arr[2]);
  }
  if (/^(f32|u32|i32|atomic<[ui]32>)$/.test(t)) return 4;
  if (/^vec2(<\w+>|[fiu])$/.test(t)) return 8;
  if (/^vec[34](<\w+>|[fiu])$/.test(t)) return 16;
  return undefined;
}

const parsed = new Map<string, ParsedKernel | null>();

/** The kernel's module parsed for combining (cached by source), or undefined when it is not in a form this file handles. */
export function parseKernel(code: string): ParsedKernel | undefined {
  let p = parsed.get(code);
  if (p === undefined) {
    p = parseUncached(code) ?? null;
    parsed.set(code, p);
  }
  return p ?? undefined;
}

function parseUncached(code: string): ParsedKernel | undefined {
  const items: Item[] = [];
  const names = new Set<string>();
  const storage: StorageVar[] = [];
  let entry: { name: string; builtins: string[]; size: [number, number, number] } | undefined;
  let workgroupBytes = 0;
  for (const text of splitItems(stripComments(code))) {
    const body = text.replace(/^(\s*@\w+(\([^)]*\))?)*\s*/, "");
    const keyword = /^\w+/.exec(body)?.[0];
    if (keyword === "enable" || keyword === "requires" || keyword === "diagnostic") {
      items.push({ text, kind: "directive" });
      continue;
    }
    const name = /^(?:struct|fn|const|override|alias|var(?:<[^>]*>)?)\s+(\w+)/.exec(body)?.[1];
    if (name === undefined) {
      if (keyword !== "const_assert") return undefined;
      items.push({ text, kind: "other" });
      continue;
    }
    names.add(name);
    if (keyword === "fn" && /@compute\b/.test(text)) {
      if (entry !== undefined) return undefined;
      const size = /@workgroup_size\(\s*(\d+)[ui]?\s*(?:,\s*(\d+)[ui]?\s*)?(?:,\s*(\d+)[ui]?\s*)?\)/.exec(text);
      const params = /\(([^)]*(?:\([^)]*\)[^)]*)*)\)\s*\{/.exec(body.slice(body.indexOf(name)))?.[1];
      if (size === null || params === undefined) return undefined;
      const builtins: string[] = [];
      for (const param of params
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s !== "")) {
        const m = /^@builtin\((\w+)\)\s*\w+\s*:/.exec(param);
        if (m === null || !BUILTINS.has(m[1]!)) return undefined;
        builtins.push(m[1]!);
      }
      entry = { name, builtins, size: [Number(size[1]), Number(size[2] ?? 1), Number(size[3] ?? 1)] };
      items.push({ text, kind: "entry" });
    } else if (keyword === "var") {
      const v = /^var<\s*(\w+)\s*(?:,\s*(\w+)\s*)?>\s*(\w+)\s*:\s*([^;=]+)/.exec(body);
      const space = v?.[1] ?? "private";
      if (space === "workgroup") {
        const bytes = typeBytes(v![4]!);
        if (bytes === undefined) return undefined;
        workgroupBytes += Math.ceil(bytes / 16) * 16;
        items.push({ text, kind: "var" });
        continue;
      }
      if (space !== "storage" && space !== "uniform") {
        items.push({ text, kind: "var" });
        continue;
      }
      const binding = /@binding\(\s*(\d+)\s*\)/.exec(text);
      if (binding === null || !/@group\(\s*0\s*\)/.test(text)) return undefined;
      const b = Number(binding[1]);
      if (space === "storage")
        storage.push({ binding: b, name, access: v![2] === "read_write" ? "read_write" : "read", type: v![4]!.trim() });
      items.push({ text, kind: "var", binding: b });
    } else items.push({ text, kind: keyword === "struct" ? "struct" : keyword === "fn" ? "fn" : "other" });
  }
  if (entry === undefined) return undefined;
  storage.sort((a, b) => a.binding - b.binding);
  // the runtime's layout: storage at 0..k-1, the parameter block at k
  if (storage.some((s, i) => s.binding !== i)) return undefined;
  const uniforms = items.filter((it) => it.binding !== undefined).length - storage.length;
  if (uniforms !== 1 || !items.some((it) => it.binding === storage.length)) return undefined;
  return {
    items,
    names,
    entryName: entry.name,
    entryBuiltins: entry.builtins,
    storage,
    workgroupSize: entry.size,
    wholeGroup: WHOLE_GROUP.test(code),
    workgroupBytes,
  };
}

/** Replace module-scope names token-wise (never after `.` or `@`; in a struct, never a member name before its `:`). */
function rename(text: string, map: ReadonlyMap<string, string>, inStruct: boolean): string {
  const re = inStruct ? /(?<![.@]\s*)\b[A-Za-z_]\w*\b(?!\s*:)/g : /(?<![.@]\s*)\b[A-Za-z_]\w*\b/g;
  return text.replace(re, (id) => map.get(id) ?? id);
}

export interface CombineLimits {
  readonly maxStorageBuffersPerShaderStage: number;
  readonly maxUniformBuffersPerShaderStage: number;
  readonly maxBindingsPerBindGroup: number;
  readonly maxComputeWorkgroupStorageSize: number;
}

/** What a binding of the combined module holds: kernel `part`'s storage buffer `index`, its parameter block, or the grids. */
export type CombinedBinding =
  | { readonly part: number; readonly index: number }
  | { readonly part: number; readonly params: true }
  | { readonly grids: true };

export interface CombinedKernel {
  readonly code: string;
  readonly bindings: readonly CombinedBinding[];
}

/**
 * One module running `parts` (their kernels and the buffers they bind, by binding) side by side; undefined when they
 * cannot share a dispatch. A buffer bound by several parts with the same access and type is bound once (Dawn rejects
 * two writable bindings of one buffer in a dispatch); one buffer both read-only and writable is not combinable.
 */
export function combineKernels(
  parts: readonly { readonly kernel: ParsedKernel; readonly buffers: readonly object[] }[],
  limits: CombineLimits,
): CombinedKernel | undefined {
  const size = (k: ParsedKernel): number => k.workgroupSize[0] * k.workgroupSize[1] * k.workgroupSize[2];
  const threads = Math.max(...parts.map((p) => size(p.kernel)));
  if (parts.some((p) => size(p.kernel) < threads && p.kernel.wholeGroup)) return undefined;
  if (parts.reduce((s, p) => s + p.kernel.workgroupBytes, 0) > limits.maxComputeWorkgroupStorageSize) return undefined;
  if (parts.length + 1 > limits.maxUniformBuffersPerShaderStage || parts.length > 16) return undefined;

  const bindings: CombinedBinding[] = [];
  /** per buffer: its storage bindings so far (combined binding, access, type, declared name) */
  const bound = new Map<object, { binding: number; access: string; type: string; name: string }[]>();
  const modules: string[] = [];
  const directives = new Set<string>();
  let storageCount = 0;
  let aliased = false;
  parts.forEach(({ kernel, buffers }, j) => {
    const map = new Map<string, string>();
    for (const n of kernel.names) map.set(n, `k${j}_${n}`);
    const newBinding = new Map<number, number | undefined>();
    for (const s of kernel.storage) {
      const buffer = buffers[s.binding]!;
      const seen = bound.get(buffer) ?? [];
      const same = seen.find((b) => b.access === s.access && b.type === s.type);
      if (same !== undefined) {
        map.set(s.name, same.name);
        newBinding.set(s.binding, undefined);
        continue;
      }
      // another binding of a buffer that is written: Dawn refuses it in one dispatch
      if (seen.some((b) => b.access === "read_write" || s.access === "read_write")) aliased = true;
      newBinding.set(s.binding, bindings.length);
      seen.push({ binding: bindings.length, access: s.access, type: s.type, name: map.get(s.name)! });
      bound.set(buffer, seen);
      bindings.push({ part: j, index: s.binding });
      storageCount++;
    }
    newBinding.set(kernel.storage.length, bindings.length);
    bindings.push({ part: j, params: true });
    const out: string[] = [];
    for (const it of kernel.items) {
      if (it.kind === "directive") directives.add(it.text.replace(/\s+/g, " "));
      else if (it.binding !== undefined) {
        const b = newBinding.get(it.binding);
        if (b !== undefined) out.push(rename(it.text.replace(/@binding\(\s*\d+\s*\)/, `@binding(${b})`), map, false));
      } else if (it.kind === "entry") {
        // the entry point as a plain function: its builtins become ordinary parameters
        const plain = it.text.replace(/^[\s\S]*?\bfn\b/, "fn").replace(/@builtin\(\w+\)\s*/g, "");
        out.push(rename(plain, map, false));
      } else out.push(rename(it.text, map, it.kind === "struct"));
    }
    modules.push(out.join("\n"));
  });
  if (
    aliased ||
    storageCount > limits.maxStorageBuffersPerShaderStage ||
    bindings.length + 1 > limits.maxBindingsPerBindGroup
  )
    return undefined;

  const gridBinding = bindings.length;
  bindings.push({ grids: true });
  const builtins = new Set(parts.flatMap((p) => p.kernel.entryBuiltins));
  const sg = [
    builtins.has("subgroup_invocation_id") ? ", @builtin(subgroup_invocation_id) sgi: u32" : "",
    builtins.has("subgroup_size") ? ", @builtin(subgroup_size) sgs: u32" : "",
  ].join("");
  const branches = parts.map(({ kernel }, j) => {
    const [X, Y, Z] = kernel.workgroupSize;
    const arg = (b: string): string =>
      ({
        workgroup_id: "id",
        num_workgroups: "gs",
        global_invocation_id: `id * vec3u(${X}u, ${Y}u, ${Z}u) + lid`,
        local_invocation_id: "lid",
        local_invocation_index: "li",
        subgroup_invocation_id: "sgi",
        subgroup_size: "sgs",
      })[b]!;
    const call = `k${j}_${kernel.entryName}(${kernel.entryBuiltins.map(arg).join(", ")});`;
    const guarded = size(kernel) < threads ? `if (li < ${size(kernel)}u) { ${call} }` : call;
    return `${j === 0 ? "" : " else "}if (w < grids.g[${j}].w) {
    let gs = grids.g[${j}].xyz;
    let r = w - ${j === 0 ? "0u" : `grids.g[${j - 1}].w`};
    let id = vec3u(r % gs.x, (r / gs.x) % gs.y, r / (gs.x * gs.y));
    let lid = vec3u(li % ${X}u, (li / ${X}u) % ${Y}u, li / ${X * Y}u);
    ${guarded}
  }`;
  });
  const code = `${[...directives].join("\n")}
${modules.join("\n")}
// per kernel: its grid (x, y, z) and the end of its workgroups in the combined linear order (w)
struct Grids { g: array<vec4u, ${parts.length}> }
@group(0) @binding(${gridBinding}) var<uniform> grids: Grids;
@compute @workgroup_size(${threads})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32${sg}) {
  let w = wid.x + wid.y * nwg.x;
  ${branches.join("")}
}
`;
  return { code, bindings };
}

/** The combined grid's uniform words (per kernel: x, y, z, end) and the workgroups to dispatch for it. */
export function combinedGrid(
  groups: readonly (readonly [number, number, number])[],
  maxPerDimension: number,
): { words: Uint32Array; groups: [number, number, number] } {
  const words = new Uint32Array(4 * groups.length);
  let total = 0;
  groups.forEach(([x, y, z], j) => {
    total += x * y * z;
    words.set([x, y, z, total], 4 * j);
  });
  const gx = Math.min(total, maxPerDimension);
  return { words, groups: [gx, Math.ceil(total / gx), 1] };
}
