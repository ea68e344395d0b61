// The device-pick contract's one decision: which samplers a model's device may choose for, greedily or by a draw,
// for one step (picksDraw) or a chain (chainsDraws), with or without the host Sampler's filters (picksDrawFiltered).
import { test } from "node:test";
import assert from "node:assert/strict";
import { deviceChoice, type DevicePicks } from "../../src/engine/device-picks.js";
import { Sampler, type SamplerOptions } from "../../src/engine/sampler.js";

const choice = (o: SamplerOptions, device: DevicePicks, where: "pick" | "chain"): string =>
  String(deviceChoice(new Sampler({ seed: 1, ...o }), device, where));

test("greedy without top logprobs or logit adjustments is the device's argmax on any model; otherwise the host's", () => {
  for (const where of ["pick", "chain"] as const) {
    assert.equal(choice({ temperature: 0 }, {}, where), "greedy");
    assert.equal(choice({ temperature: 0, logprobs: 2 }, { picksDraw: true, chainsDraws: true }, where), "undefined");
    assert.equal(
      choice({ temperature: 0, presencePenalty: 0.5 }, { picksDraw: true, chainsDraws: true }, where),
      "undefined",
    );
  }
});

test("a draw where the model takes draws there: picksDraw for a step, chainsDraws for a chain", () => {
  const t = { temperature: 0.8 };
  assert.equal(choice(t, {}, "pick"), "undefined");
  assert.equal(choice(t, { picksDraw: true }, "pick"), "draw");
  assert.equal(choice(t, { picksDraw: true }, "chain"), "undefined");
  assert.equal(choice(t, { chainsDraws: true }, "chain"), "draw");
  assert.equal(choice(t, { chainsDraws: true }, "pick"), "undefined");
  assert.equal(
    choice({ ...t, logprobs: 1 }, { picksDraw: true, chainsDraws: true, picksDrawFiltered: true }, "pick"),
    "undefined",
  );
});

test("filters (top-k ≤ 64, top-p, min-p) only on a model that filters its draws", () => {
  const both = { picksDraw: true, chainsDraws: true };
  for (const o of [{ topK: 40 }, { topP: 0.9 }, { minP: 0.05 }, { topK: 64, topP: 0.95, minP: 0.01 }]) {
    assert.equal(choice({ temperature: 0.8, ...o }, both, "pick"), "undefined", JSON.stringify(o));
    assert.equal(
      choice({ temperature: 0.8, ...o }, { ...both, picksDrawFiltered: true }, "chain"),
      "draw",
      JSON.stringify(o),
    );
  }
  assert.equal(choice({ temperature: 0.8, topK: 65 }, { ...both, picksDrawFiltered: true }, "pick"), "undefined");
});
