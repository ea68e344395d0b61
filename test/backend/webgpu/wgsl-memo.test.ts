// memoWGSL: a generator's source for equal arguments is built once and handed out as the same string; arguments that
// differ (also undefined against null or a missing key) are kept apart; non-data arguments are refused.
import { test } from "node:test";
import assert from "node:assert/strict";
import { memoWGSL } from "../../../src/backend/webgpu/core/wgsl-memo.js";
import { LatentError } from "../../../src/util/errors.js";

test("memoWGSL builds each source once per distinct arguments", () => {
  let calls = 0;
  const gen = memoWGSL(
    (type: number, shape: { rows: number; fx?: { norm?: boolean } | null }, dual?: boolean): string => {
      calls++;
      return `// ${type} ${JSON.stringify(shape)} ${String(dual)} ${"x".repeat(1000)}`;
    },
  );
  const a = gen(12, { rows: 4 });
  assert.equal(gen(12, { rows: 4 }), a);
  assert.equal(calls, 1);
  const distinct = [
    gen(12, { rows: 8 }),
    gen(13, { rows: 4 }),
    gen(12, { rows: 4 }, true),
    gen(12, { rows: 4 }, false),
    gen(12, { rows: 4, fx: null }),
    gen(12, { rows: 4, fx: {} }),
    gen(12, { rows: 4, fx: { norm: true } }),
  ];
  assert.equal(calls, 8);
  assert.equal(new Set([a, ...distinct]).size, 8);
  // an explicit undefined is the generator's default: same source, built apart (kept apart from null)
  gen(12, { rows: 4, fx: undefined }, undefined);
  assert.equal(calls, 9);
  assert.equal(gen(12, { rows: 4, fx: undefined }, undefined), gen(12, { rows: 4, fx: undefined }, undefined));
  assert.equal(calls, 9);
  const bad = memoWGSL((f: unknown) => String(f));
  assert.throws(() => bad(() => 1), LatentError);
});
