import { UsageError } from "../../util/errors.js";

/**
 * A JSON Schema (the common subset that structured-output clients send) compiled to the grammar nodes the recognizer
 * walks. Enum and const values become literal texts: the model must write them in JSON.stringify's spelling, a subset
 * of the valid texts that keeps matching byte-exact. Keywords outside the subset are refused by name, never ignored,
 * so a client never gets a 200 whose output breaks a rule it asked for.
 */
export type SchemaNode =
  | { readonly k: "any" }
  | {
      readonly k: "object";
      readonly props: ReadonlyMap<string, SchemaNode> | null;
      readonly required: ReadonlySet<string>;
      readonly extra: SchemaNode | null;
    }
  | { readonly k: "array"; readonly items: SchemaNode; readonly minItems: number; readonly maxItems: number }
  | { readonly k: "string"; readonly minLength: number; readonly maxLength: number }
  | { readonly k: "number"; readonly integer: boolean }
  | { readonly k: "literal"; readonly texts: readonly string[] }
  | { readonly k: "union"; readonly of: readonly SchemaNode[] }
  | { readonly k: "ref"; readonly name: string; target: SchemaNode | undefined };

export const ANY: SchemaNode = { k: "any" };
/** json_object mode: the top value is an object of any keys and values */
export const ANY_OBJECT: SchemaNode = { k: "object", props: null, required: new Set(), extra: ANY };

/** Most schema nodes (objects, arrays, values) walked: bounds compile time and memory for a hostile schema. */
export const MAX_SCHEMA_NODES = 5000;
/** Deepest nesting of schema objects and arrays. */
export const MAX_SCHEMA_DEPTH = 64;
/** Longest schema, as JSON text: a few nodes can still hold megabytes of keys, enum strings or descriptions. */
export const MAX_SCHEMA_CHARS = 256 * 1024;
/** Most enum values (each is a literal the recognizer tracks per byte). */
export const MAX_ENUM = 512;

/** Keywords that describe a value without constraining what we generate (annotations). */
const ANNOTATIONS = new Set([
  "title",
  "description",
  "$schema",
  "$id",
  "$comment",
  "examples",
  "default",
  "deprecated",
  "readOnly",
  "writeOnly",
]);
const HANDLED = new Set([
  "type",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "enum",
  "const",
  "minItems",
  "maxItems",
  "minLength",
  "maxLength",
  "anyOf",
  "$ref",
  "$defs",
  "definitions",
]);

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Iterative walk counting every object/array in `schema` and its nesting depth before anything recursive touches it:
 * a schema nested 100 000 deep must get a 400, not a stack overflow.
 */
function checkSize(schema: unknown): void {
  const stack: [unknown, number][] = [[schema, 1]];
  let count = 0;
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v !== "object" || v === null) continue;
    if (++count > MAX_SCHEMA_NODES)
      throw new UsageError(`the JSON schema is too large: more than ${MAX_SCHEMA_NODES} objects and arrays`);
    if (depth > MAX_SCHEMA_DEPTH)
      throw new UsageError(`the JSON schema is nested too deeply: more than ${MAX_SCHEMA_DEPTH} levels`);
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, depth + 1]);
  }
}

/** Compiles `schema`; UsageError (→ 400) naming the keyword or rule that cannot be honoured. Declared properties always restrict the keys, strict or not. */
export function compileSchema(schema: unknown): SchemaNode {
  checkSize(schema);
  // (after checkSize: the depth is bounded, so stringify cannot overflow the stack)
  const chars = JSON.stringify(schema)?.length ?? 0;
  if (chars > MAX_SCHEMA_CHARS)
    throw new UsageError(`the JSON schema is too large: ${chars} characters of JSON (at most ${MAX_SCHEMA_CHARS})`);
  if (!isObj(schema))
    throw new UsageError(
      `the JSON schema must be an object, got ${schema === null ? "null" : Array.isArray(schema) ? "array" : typeof schema}`,
    );
  const defs = new Map<string, unknown>();
  for (const key of ["$defs", "definitions"]) {
    const d = schema[key];
    if (d === undefined) continue;
    if (!isObj(d)) throw new UsageError(`'${key}' must be an object`);
    for (const [name, sub] of Object.entries(d)) defs.set(`#/${key}/${name}`, sub);
  }
  const refs = new Map<string, SchemaNode & { k: "ref" }>();
  const compile = (s: unknown, where: string): SchemaNode => {
    if (s === true) return ANY;
    if (!isObj(s)) throw new UsageError(`${where}: a schema must be an object, got ${JSON.stringify(s)?.slice(0, 40)}`);
    for (const key of Object.keys(s)) {
      if (!HANDLED.has(key) && !ANNOTATIONS.has(key))
        throw new UsageError(`${where}: the JSON schema keyword '${key.slice(0, 64)}' is not supported`);
    }
    if (s["$ref"] !== undefined) {
      const ref = s["$ref"];
      if (typeof ref !== "string") throw new UsageError(`${where}: '$ref' must be a string`);
      if (ref !== "#" && !defs.has(ref))
        throw new UsageError(
          `${where}: '$ref' ${JSON.stringify(ref.slice(0, 80))} is not supported (only "#" and local "#/$defs/…" or "#/definitions/…")`,
        );
      let node = refs.get(ref);
      if (node === undefined) {
        node = { k: "ref", name: ref, target: undefined };
        refs.set(ref, node);
        node.target = compile(ref === "#" ? schema : defs.get(ref), ref);
      }
      return node;
    }
    if (s["const"] !== undefined) return literal([s["const"]], where);
    if (s["enum"] !== undefined) {
      const e = s["enum"];
      if (!Array.isArray(e) || e.length === 0) throw new UsageError(`${where}: 'enum' must be a non-empty array`);
      if (e.length > MAX_ENUM) throw new UsageError(`${where}: 'enum' may hold at most ${MAX_ENUM} values`);
      return literal(e, where);
    }
    if (s["anyOf"] !== undefined) {
      const a = s["anyOf"];
      if (!Array.isArray(a) || a.length === 0) throw new UsageError(`${where}: 'anyOf' must be a non-empty array`);
      return { k: "union", of: a.map((sub, i) => compile(sub, `${where}.anyOf[${i}]`)) };
    }
    const type = s["type"];
    if (type === undefined) return ANY;
    const types = Array.isArray(type) ? type : [type];
    if (types.length === 0) throw new UsageError(`${where}: 'type' must not be empty`);
    const nodes = types.map((t) => typed(s, t, where));
    return nodes.length === 1 ? nodes[0] : { k: "union", of: nodes };
  };
  const count = (s: Json, key: string, where: string, fallback: number): number => {
    const v = s[key];
    if (v === undefined) return fallback;
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0)
      throw new UsageError(`${where}: '${key}' must be an integer >= 0`);
    return v;
  };
  const typed = (s: Json, t: unknown, where: string): SchemaNode => {
    switch (t) {
      case "string": {
        const node = {
          k: "string",
          minLength: count(s, "minLength", where, 0),
          maxLength: count(s, "maxLength", where, Infinity),
        } as const;
        if (node.minLength > node.maxLength) throw new UsageError(`${where}: 'minLength' exceeds 'maxLength'`);
        return node;
      }
      case "number":
      case "integer":
        return { k: "number", integer: t === "integer" };
      case "boolean":
        return { k: "literal", texts: ["true", "false"] };
      case "null":
        return { k: "literal", texts: ["null"] };
      case "array": {
        const items = s["items"] === undefined ? ANY : compile(s["items"], `${where}.items`);
        const node = {
          k: "array",
          items,
          minItems: count(s, "minItems", where, 0),
          maxItems: count(s, "maxItems", where, Infinity),
        } as const;
        if (node.minItems > node.maxItems) throw new UsageError(`${where}: 'minItems' exceeds 'maxItems'`);
        return node;
      }
      case "object": {
        const p = s["properties"];
        if (p !== undefined && !isObj(p)) throw new UsageError(`${where}: 'properties' must be an object`);
        const props =
          p === undefined
            ? null
            : new Map(Object.entries(p).map(([k, sub]) => [k, compile(sub, `${where}.properties.${k.slice(0, 64)}`)]));
        const req = s["required"] ?? [];
        if (!Array.isArray(req) || !req.every((r) => typeof r === "string"))
          throw new UsageError(`${where}: 'required' must be an array of strings`);
        for (const r of req)
          if (props !== null && !props.has(r))
            throw new UsageError(
              `${where}: required property ${JSON.stringify(r.slice(0, 64))} is not in 'properties'`,
            );
        const ap = s["additionalProperties"];
        // Declared properties restrict the keys (what strict mode demands; without strict, still a valid instance).
        // Without 'properties', any key is allowed unless additionalProperties is false.
        let extra: SchemaNode | null = null;
        if (props === null)
          extra =
            ap === false ? null : ap === undefined || ap === true ? ANY : compile(ap, `${where}.additionalProperties`);
        else if (ap !== undefined && ap !== false && ap !== true) compile(ap, `${where}.additionalProperties`);
        return { k: "object", props, required: new Set(req as string[]), extra };
      }
      default:
        throw new UsageError(`${where}: 'type' ${JSON.stringify(t)?.slice(0, 40)} is not supported`);
    }
  };
  const root = compile(schema, "schema");
  for (const ref of refs.values()) checkRefConsumes(ref);
  const depth = minimalDepth(root);
  if (depth === Infinity)
    throw new UsageError("the JSON schema has no finite instance: its required properties or items recurse forever");
  if (depth > MAX_VALUE_DEPTH)
    throw new UsageError(`the JSON schema needs values nested ${depth} deep (at most ${MAX_VALUE_DEPTH})`);
  return root;
}

/** Deepest nesting of objects and arrays in a generated value (the recognizer's bound). */
export const MAX_VALUE_DEPTH = 64;

/**
 * The least nesting of objects and arrays in any instance of `root` (Infinity: none is finite, e.g. a required
 * property that refers back to its object). A fixpoint over the node graph, since $ref makes it cyclic: each round
 * can only lower a node's depth, and a chain of refs needs at most one round per node.
 */
function minimalDepth(root: SchemaNode): number {
  const nodes: SchemaNode[] = [];
  const seen = new Set<SchemaNode>();
  const stack = [root];
  while (stack.length > 0) {
    const n = stack.pop()!;
    if (seen.has(n)) continue;
    seen.add(n);
    nodes.push(n);
    if (n.k === "union") stack.push(...n.of);
    else if (n.k === "ref") stack.push(n.target!);
    else if (n.k === "array") stack.push(n.items);
    else if (n.k === "object") for (const p of n.props?.values() ?? []) stack.push(p);
  }
  const depth = new Map<SchemaNode, number>(nodes.map((n) => [n, Infinity]));
  const of = (n: SchemaNode): number => depth.get(n)!;
  for (let round = 0, changed = true; changed && round <= nodes.length; round++) {
    changed = false;
    for (const n of nodes) {
      let d: number;
      if (n.k === "union") d = Math.min(...n.of.map(of));
      else if (n.k === "ref") d = of(n.target!);
      else if (n.k === "array") d = n.minItems === 0 ? 1 : 1 + of(n.items);
      else if (n.k === "object") d = 1 + Math.max(0, ...[...n.required].map((r) => of(n.props?.get(r) ?? ANY)));
      else d = 0;
      if (d < of(n)) {
        depth.set(n, d);
        changed = true;
      }
    }
  }
  return of(root);
}

function literal(values: readonly unknown[], where: string): SchemaNode {
  const texts = values.map((v) => {
    if (typeof v === "number" && !Number.isFinite(v)) throw new UsageError(`${where}: enum/const value is not JSON`);
    return JSON.stringify(v);
  });
  return { k: "literal", texts: [...new Set(texts)] };
}

/** A $ref that reaches itself through refs and anyOf alone (no byte written between) would expand forever: refused. */
function checkRefConsumes(start: SchemaNode & { k: "ref" }): void {
  const seen = new Set<SchemaNode>();
  const stack: SchemaNode[] = [start.target!];
  while (stack.length > 0) {
    const n = stack.pop()!;
    if (n === start)
      throw new UsageError(
        `'$ref' ${JSON.stringify(start.name.slice(0, 80))} refers to itself without writing anything: an infinite recursion`,
      );
    if (seen.has(n)) continue;
    seen.add(n);
    if (n.k === "union") stack.push(...n.of);
    else if (n.k === "ref") stack.push(n.target!);
  }
}
