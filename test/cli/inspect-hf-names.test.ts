// `latent inspect --hf-names`: every tensor of every kit model shows the Hugging Face tensor(s) it holds.
import { test } from "node:test";
import assert from "node:assert/strict";
import { inspectMain, type InspectIO } from "../../src/cli/inspect.js";
import type { InspectSummary } from "../../src/gguf/summary.js";
import { hfToGguf } from "../../src/convert/names.js";

const DIR = new URL("../fixtures/models/", import.meta.url).pathname;

async function inspectJson(args: string[]): Promise<InspectSummary> {
  let out = "";
  const io: InspectIO = { out: (t) => void (out += t), err: () => {}, tty: false };
  await inspectMain(args, io);
  return JSON.parse(out) as InspectSummary;
}

for (const name of ["ds2-lite", "ds2-v3", "glm-dsa-topk8", "ds2-v3-mixed-q"]) {
  test(`${name}: --hf-names maps every tensor, and each HF name maps back`, async () => {
    const s = await inspectJson([`${DIR}${name}.gguf`, "--hf-names", "--json"]);
    assert.ok(s.tensors !== undefined && s.tensors.length > 0);
    for (const t of s.tensors) {
      assert.ok(Array.isArray(t.hf_names) && t.hf_names.length > 0, `${t.name} has HF names`);
      for (const hf of t.hf_names)
        assert.ok(hfToGguf(hf, "current")!.gguf.includes(t.name), `${t.name} → ${hf} → back`);
    }
    const kb = s.tensors.find((t) => t.name === "blk.0.attn_k_b.weight")!;
    assert.deepEqual(kb.hf_names, ["model.layers.0.self_attn.kv_b_proj.weight"]);
  });
}
