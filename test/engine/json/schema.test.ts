// The schema layer: what a compiled schema lets through, and the 400s (UsageError) for what it cannot honour,
// including hostile schemas that must be refused fast rather than crash or hang.
import { test } from "node:test";
import assert from "node:assert/strict";
import { compileSchema, MAX_SCHEMA_DEPTH } from "../../../src/engine/json/schema.js";
import { JsonState } from "../../../src/engine/json/recognizer.js";
import { UsageError } from "../../../src/util/errors.js";

const accepts = (schema: unknown, text: string): boolean =>
  JsonState.start(compileSchema(schema)).feedText(text)?.complete === true;
const viable = (schema: unknown, text: string): boolean =>
  JsonState.start(compileSchema(schema)).feedText(text) !== null;

const PERSON = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 5 },
    age: { type: "integer" },
    mood: { enum: ["happy", "sad", 3] },
    tags: { type: "array", items: { type: "string" }, minItems: 1, maxItems: 2 },
    spouse: {
      anyOf: [{ type: "null" }, { type: "object", properties: { name: { type: "string" } }, required: ["name"] }],
    },
  },
  required: ["name", "age"],
  additionalProperties: false,
};

test("types, properties, required and the closed key set", () => {
  assert.ok(accepts(PERSON, '{"name": "Ann", "age": 30}'));
  assert.ok(accepts(PERSON, '{"age": -3, "name": "Bo", "mood": "sad", "tags": ["x"], "spouse": {"name": "Cy"}}'));
  assert.ok(accepts(PERSON, '{"name":"A","age":1,"spouse":null,"mood":3}'));
  assert.ok(!accepts(PERSON, '{"name": "Ann"}'), "a required key missing: the object may not close");
  assert.equal(JsonState.start(compileSchema(PERSON)).feedText('{"name": "Ann"}'), null);
  assert.ok(!viable(PERSON, '{"nick"'), "an undeclared key");
  assert.ok(!viable(PERSON, '{"name": "Ann", "name"'), "a key twice");
  assert.ok(!viable(PERSON, '{"age": 1.5'), "integer");
  assert.ok(!viable(PERSON, '{"name": ""'), "minLength");
  assert.ok(!viable(PERSON, '{"name": "abcdef'), "maxLength");
  assert.ok(!viable(PERSON, '{"mood": "angry'), "enum");
  assert.ok(!viable(PERSON, '{"tags": []'), "minItems");
  assert.ok(!viable(PERSON, '{"tags": ["a", "b", '), "maxItems");
  assert.ok(!viable(PERSON, '{"spouse": 1'), "anyOf");
  assert.ok(!viable(PERSON, '{"spouse": {}'), "required in a nested object");
});

test("unions, const, booleans and strings with escapes counted as one character", () => {
  assert.ok(accepts({ type: ["string", "null"] }, "null"));
  assert.ok(accepts({ type: ["string", "null"] }, '"x"'));
  assert.ok(!viable({ type: ["string", "null"] }, "1"));
  assert.ok(accepts({ const: { a: [1, "b"] } }, '{"a":[1,"b"]}'));
  assert.ok(accepts({ type: "boolean" }, "false"));
  assert.ok(accepts({ type: "string", maxLength: 2 }, '"\\n\\u00e9"'));
  assert.ok(!viable({ type: "string", maxLength: 2 }, '"\\n\\u00e9x'));
  assert.ok(accepts({ enum: [1, 12] }, "1") && accepts({ enum: [1, 12] }, "12") && !viable({ enum: [1, 12] }, "13"));
  assert.ok(accepts({ type: "number" }, "-0.5e+10") && !viable({ type: "integer" }, "1e"));
});

test("local $ref to $defs and definitions, and recursion through values", () => {
  const tree = {
    $defs: {
      node: {
        type: "object",
        properties: { v: { type: "integer" }, kids: { type: "array", items: { $ref: "#/$defs/node" } } },
        required: ["v"],
        additionalProperties: false,
      },
    },
    $ref: "#/$defs/node",
  };
  assert.ok(accepts(tree, '{"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3}]}'));
  assert.ok(!viable(tree, '{"v": 1, "kids": [{"w"'));
  const list = {
    anyOf: [{ type: "null" }, { type: "object", properties: { next: { $ref: "#" } }, required: ["next"] }],
  };
  assert.ok(accepts(list, '{"next": {"next": null}}'));
  assert.ok(
    accepts({ definitions: { s: { type: "string" } }, type: "array", items: { $ref: "#/definitions/s" } }, '["a"]'),
  );
});

function refused(schema: unknown, pattern: RegExp): void {
  assert.throws(
    () => compileSchema(schema),
    (e: unknown) => e instanceof UsageError && pattern.test(e.message),
  );
}

test("unsupported keywords are refused by name, never ignored", () => {
  refused({ type: "string", pattern: "^a$" }, /'pattern' is not supported/);
  refused({ type: "object", properties: { a: { type: "number", minimum: 0 } } }, /'minimum' is not supported/);
  refused({ oneOf: [{ type: "string" }] }, /'oneOf'/);
  refused({ $ref: "https://example.com/s.json" }, /'\$ref' .* is not supported/);
  refused({ $ref: "#/$defs/missing" }, /not supported/);
  refused({ type: "date" }, /'type' "date" is not supported/);
  refused({ type: "object", required: ["x"], properties: {} }, /required property "x"/);
  refused({ type: "string", minLength: 3, maxLength: 2 }, /minLength/);
});

test("hostile schemas: deep nesting, recursive $ref, 1 MB — a clear refusal, fast", () => {
  let deep: unknown = { type: "string" };
  for (let i = 0; i < 100_000; i++) deep = { type: "array", items: deep };
  let t = performance.now();
  refused(deep, /nested too deeply/);
  refused(
    { $defs: { a: { $ref: "#/$defs/b" }, b: { anyOf: [{ $ref: "#/$defs/a" }] } }, $ref: "#/$defs/a" },
    /refers to itself/,
  );
  refused({ $ref: "#" }, /refers to itself/);
  refused({ type: "object", properties: { next: { $ref: "#" } }, required: ["next"] }, /no finite instance/);
  refused({ type: "array", minItems: 1, items: { $ref: "#" } }, /no finite instance/);
  const chain: Record<string, unknown> = {};
  for (let i = 0; i < 100; i++)
    chain[`d${i}`] = i === 99 ? { type: "null" } : { type: "array", minItems: 1, items: { $ref: `#/$defs/d${i + 1}` } };
  refused({ $defs: chain, $ref: "#/$defs/d0" }, /nested 99 deep/);
  const props: Record<string, unknown> = {};
  for (let i = 0; i < 20_000; i++) props[`property_number_${i}_${"x".repeat(20)}`] = { type: "string" };
  assert.ok(JSON.stringify(props).length > 1_000_000);
  refused({ type: "object", properties: props }, /too large/);
  refused({ enum: Array.from({ length: 10_000 }, (_, i) => i) }, /too large|at most/);
  t = performance.now() - t;
  assert.ok(t < 2000, `took ${t} ms`);
  assert.ok(MAX_SCHEMA_DEPTH >= 16);
});
