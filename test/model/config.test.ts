// Config from GGUF metadata: defaults, quirks and clear errors naming the key.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { GGUFFile } from "../../src/gguf/file.js";
import { Metadata } from "../../src/gguf/metadata.js";
import { GGUFValueType, type GGUFMetadataEntry } from "../../src/gguf/types.js";
import { parseConfig, yarnMscale } from "../../src/model/config.js";
import { ModelConfigError } from "../../src/util/errors.js";

const DIR = new URL("../fixtures/models/", import.meta.url).pathname;

function meta(name: string, edit: (m: Map<string, GGUFMetadataEntry>) => void = () => {}): Metadata {
  const f = GGUFFile.open(join(DIR, `${name}.gguf`));
  const m = new Map(f.shards[0].metadata);
  f.close();
  edit(m);
  return new Metadata(m);
}
const u32 = (value: number): GGUFMetadataEntry => ({ type: GGUFValueType.UINT32, value });

test("kit models: derived constants equal llama.cpp's (models README table)", () => {
  const cases: [string, number, number][] = [
    ["ds2-qlora-softmax", 0.281008856, 1],
    ["ds2-lite", 0.324481077, 1],
    ["ds2-v3", 0.331253757, 1],
    ["glm-dsa-topk8", 0.331253754, 1.36888795],
    ["ds2-v3-mixed-q", 0.27046756, 1],
  ];
  for (const [name, kq, ropeM] of cases) {
    const c = parseConfig(meta(name));
    assert.ok(Math.abs(c.kqScale - kq) < 1e-8, `${name} kq_scale ${c.kqScale}`);
    assert.ok(Math.abs(c.ropeMscale - ropeM) < 1e-7, `${name} rope mscale ${c.ropeMscale}`);
  }
  const lite = parseConfig(meta("ds2-lite"));
  assert.equal(lite.qLoraRank, 0);
  assert.equal(lite.nHead, 3);
  assert.equal(lite.vHead, 24);
  assert.equal(lite.qkNope, 16);
  const v3 = parseConfig(meta("ds2-v3"));
  assert.deepEqual(
    [v3.gating, v3.nGroup, v3.nGroupUsed, v3.weightsNorm, v3.weightsScale],
    ["sigmoid", 4, 2, true, 2.5],
  );
  assert.ok(Math.abs(v3.yarn!.mscaleAllDim! - 1) < 1e-6, "yarn_log_multiplier 0.1 → mscale_all_dim 1");
});

test("missing expert_gating_func: softmax for deepseek2, sigmoid for the GLM-4.7-Flash shape and for glm-dsa", () => {
  const noKey = (name: string, extra: (m: Map<string, GGUFMetadataEntry>) => void = () => {}) =>
    parseConfig(
      meta(name, (m) => {
        m.delete(`${name.startsWith("glm") ? "glm-dsa" : "deepseek2"}.expert_gating_func`);
        extra(m);
      }),
    );
  const ds = noKey("ds2-v3");
  assert.deepEqual([ds.gating, ds.gatingSource], ["softmax", "default-softmax"]);
  const flash = noKey("ds2-v3", (m) => {
    m.set("deepseek2.block_count", u32(47));
    m.set("deepseek2.vocab_size", u32(154880));
  });
  assert.deepEqual([flash.gating, flash.gatingSource], ["sigmoid", "glm47-flash-heuristic"]);
  const glm = noKey("glm-dsa-topk8");
  assert.deepEqual([glm.gating, glm.gatingSource], ["sigmoid", "glm-dsa-default"]);
});

test("glm-dsa block_count includes the MTP layers", () => {
  const c = parseConfig(
    meta("glm-dsa-topk8", (m) => {
      m.set("glm-dsa.block_count", u32(4));
      m.set("glm-dsa.nextn_predict_layers", u32(1));
    }),
  );
  assert.equal(c.nLayer, 3);
  assert.equal(c.nNextn, 1);
});

test("absent or 0 q_lora_rank means a single attn_q", () => {
  assert.equal(parseConfig(meta("ds2-lite", (m) => m.delete("deepseek2.attention.q_lora_rank"))).qLoraRank, 0);
  assert.equal(parseConfig(meta("ds2-lite")).qLoraRank, 0);
});

test("glm-dsa ignores yarn_log_multiplier (llama.cpp); deepseek2 divides it by 0.1", () => {
  const a = parseConfig(meta("glm-dsa-topk8"));
  const b = parseConfig(meta("glm-dsa-topk8", (m) => m.delete("glm-dsa.rope.scaling.yarn_log_multiplier")));
  assert.equal(a.kqScale, b.kqScale);
  assert.equal(a.ropeMscale, yarnMscale(40, 1));
  const d = parseConfig(meta("ds2-qlora-softmax"));
  assert.ok(Math.abs(d.kqScale * Math.sqrt(32) - yarnMscale(40, 0.707) ** 2) < 1e-6);
});

test("inconsistent metadata: errors name the key", () => {
  const bad: [string, (m: Map<string, GGUFMetadataEntry>) => void, RegExp][] = [
    ["ds2-v3", (m) => m.delete("deepseek2.embedding_length"), /deepseek2\.embedding_length/],
    ["ds2-v3", (m) => m.set("deepseek2.expert_used_count", u32(99)), /deepseek2\.expert_used_count/],
    ["ds2-v3", (m) => m.set("deepseek2.expert_group_count", u32(3)), /expert_group_count/],
    ["ds2-v3", (m) => m.set("deepseek2.expert_gating_func", u32(7)), /deepseek2\.expert_gating_func/],
    ["ds2-v3", (m) => m.set("deepseek2.rope.dimension_count", u32(7)), /rope\.dimension_count/],
    ["ds2-v3", (m) => m.set("deepseek2.attention.key_length", u32(41)), /attention\.key_length/],
    ["ds2-v3", (m) => m.delete("deepseek2.attention.value_length_mla"), /value_length_mla/],
    [
      "ds2-v3",
      (m) => m.set("deepseek2.rope.scaling.type", { type: GGUFValueType.STRING, value: "longrope" }),
      /rope\.scaling\.type/,
    ],
    [
      "ds2-v3",
      (m) => m.set("general.architecture", { type: GGUFValueType.STRING, value: "llama" }),
      /general\.architecture/,
    ],
    [
      "ds2-v3",
      (m) => m.set("deepseek2.attention.head_count", { type: GGUFValueType.STRING, value: "4" }),
      /attention\.head_count/,
    ],
    ["glm-dsa-topk8", (m) => m.set("glm-dsa.nextn_predict_layers", u32(3)), /nextn_predict_layers/],
    ["glm-dsa-topk8", (m) => m.delete("glm-dsa.attention.indexer.top_k"), /indexer/],
  ];
  for (const [name, edit, re] of bad) {
    assert.throws(
      () => parseConfig(meta(name, edit)),
      (e: unknown) =>
        e instanceof Error && re.test(e.message) && (e instanceof ModelConfigError || e.name === "GGUFError"),
      re.source,
    );
  }
});
