// The step-skeleton probe (kernel-bench --handoff): with its phases one, two, a layer's or all to a dispatch, one step
// must leave the same last vector as the recurrence computed in JavaScript, with no poll timed out and no sentinel read
// — so that its timings compare skeletons that did the same work (the in-dispatch hand-off included).
import { test } from "node:test";
import assert from "node:assert/strict";
import { handoffSkeleton, v2LitePhaseBytes } from "../../../src/backend/webgpu/handoff-probe.js";
import { gpuOrSkip } from "./helpers.js";

const { rt, skip } = await gpuOrSkip();

test("the phase bytes: 188 phases in the step's order, 162 at the fewest, the same bytes in both", () => {
  const step = v2LitePhaseBytes();
  const fewest = v2LitePhaseBytes(true);
  assert.equal(step.length, 5 + 26 * 7 + 1);
  assert.equal(fewest.length, 5 + 26 * 6 + 1);
  const sum = (a: number[]): number => a.reduce((x, y) => x + y, 0);
  assert.ok(Math.abs(sum(step) - sum(fewest)) <= 26, `${sum(step)} vs ${sum(fewest)}`);
  assert.ok(sum(step) > 1.5e9 && sum(step) < 1.62e9, `${sum(step)} bytes`);
});

test("every grouping of the skeleton's phases computes the recurrence", { skip }, async () => {
  // phases of 1 to ~30 workgroups (the head's bytes scaled down most), so that hand-offs inside a dispatch meet
  // producers of several workgroups
  for (const [bytes, arith] of [
    [v2LitePhaseBytes().map((b) => b * 0.004), false],
    [v2LitePhaseBytes(true).map((b) => b * 0.002), true],
  ] as const) {
    const sk = handoffSkeleton(rt!, bytes, { arith });
    for (const group of [1, 2, 7, sk.phases]) {
      const { mismatches, error } = await sk.check(rt!, group);
      assert.deepEqual({ mismatches, error }, { mismatches: 0, error: 0 }, `${sk.phases} phases, ${group} a dispatch${arith ? ", decoded" : ""}`);
    }
  }
});
