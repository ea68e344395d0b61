// `latent inspect --plan`: the byte sums are the tensor table's (checked against --tensors of the same file), the
// latent cache is (kv_lora_rank + rope dims [+ indexer keys]) float32 per token per layer, and the choice follows the
// budgets through every mode.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { inspectMain, type InspectIO } from "../../src/cli/inspect.js";
import { UsageError } from "../../src/util/errors.js";
import { parseByteSize } from "../../src/util/byte-size.js";
import { CASES, synthModel } from "../helpers/synth.js";

interface PlanJson {
  layers: number;
  loaded_bytes: number;
  unused_bytes: number;
  resident_bytes: number;
  expert_bytes: {
    total: number;
    per_layer: number;
    per_expert: number;
    layers: { layer: number; bytes: number; per_expert: number }[];
  };
  largest_layer_bytes: number;
  kv: { bytes_per_1k_tokens: number; indexer_layers: number };
  context: number;
  kv_bytes: number;
  modes: { mode: string; host_bytes: number; gpu_bytes: number; disk_bytes_per_token: number; fits: boolean }[];
  choice: string | null;
  reason: string;
}
interface Out {
  hyperparameters: Record<string, number>;
  tensors: { name: string; bytes: number; shape: number[] }[];
  plan: PlanJson;
}

async function inspect(args: string[]): Promise<string> {
  let out = "";
  const io: InspectIO = { out: (t) => void (out += t), err: () => {}, tty: false };
  await inspectMain(args, io);
  return out;
}

const ds = synthModel({ ...CASES[0], type: "Q8_0" }, 3);
const glm = synthModel(CASES[4], 4);
after(() => {
  ds.cleanup();
  glm.cleanup();
});

for (const [label, m] of [
  ["deepseek2 Q8_0", ds],
  ["glm-dsa with an MTP layer", glm],
] as const)
  test(`${label}: the plan's byte sums equal the tensor table's`, async () => {
    const o = JSON.parse(await inspect([m.path, "--json", "--tensors", "--plan", "--memory", "64G"])) as Out;
    const p = o.plan;
    const hp = o.hyperparameters;
    const main = hp.block_count - (hp.nextn_predict_layers ?? 0);
    const layerOf = (n: string): number => (n.startsWith("blk.") ? Number(n.split(".")[1]) : -1);
    const sum = (keep: (t: Out["tensors"][number]) => boolean): number =>
      o.tensors.filter(keep).reduce((a, t) => a + t.bytes, 0);
    const isExpert = (n: string): boolean => /_exps\.weight$/.test(n);
    assert.equal(p.layers, main);
    assert.equal(
      p.loaded_bytes,
      sum((t) => layerOf(t.name) < main),
    );
    assert.equal(
      p.unused_bytes,
      sum((t) => layerOf(t.name) >= main),
    );
    if (label.startsWith("glm")) assert.ok(p.unused_bytes > 0, "the MTP layer is not read");
    assert.equal(
      p.expert_bytes.total,
      sum((t) => isExpert(t.name) && layerOf(t.name) < main),
    );
    assert.ok(p.expert_bytes.total > 0);
    assert.equal(p.resident_bytes, p.loaded_bytes - p.expert_bytes.total);
    for (const l of p.expert_bytes.layers) {
      const experts = o.tensors.filter((t) => isExpert(t.name) && layerOf(t.name) === l.layer);
      assert.equal(
        l.bytes,
        experts.reduce((a, t) => a + t.bytes, 0),
      );
      assert.equal(l.per_expert, Math.ceil(l.bytes / experts[0].shape[2]));
    }
    assert.equal(p.expert_bytes.per_layer, Math.max(...p.expert_bytes.layers.map((l) => l.bytes)));
    assert.equal(
      p.largest_layer_bytes,
      Math.max(...Array.from({ length: main }, (_, i) => sum((t) => layerOf(t.name) === i))),
    );
    // latent cache: float32 c and k_pe per layer, plus the indexer key in each layer that has an indexer
    const idxLayers = o.tensors.filter(
      (t) => /^blk\.\d+\.indexer\.attn_k\.weight$/.test(t.name) && layerOf(t.name) < main,
    ).length;
    const perToken =
      4 *
      (main * (hp["attention.kv_lora_rank"] + hp["rope.dimension_count"]) +
        idxLayers * (hp["attention.indexer.key_length"] ?? 0));
    assert.equal(p.kv.indexer_layers, idxLayers);
    if (label.startsWith("glm")) assert.ok(idxLayers > 0);
    assert.equal(p.kv.bytes_per_1k_tokens, 1000 * perToken);
    assert.equal(p.kv_bytes, 4096 * perToken);
    const cpu = p.modes.find((x) => x.mode === "cpu")!;
    assert.equal(cpu.host_bytes, p.loaded_bytes + p.kv_bytes);
    assert.equal(p.choice, "cpu");
  });

test("the choice follows the budgets: gpu, gpu-offload, cpu, cpu-stream, none", async () => {
  const base = JSON.parse(await inspect([ds.path, "--json", "--plan", "--memory", "64G"])) as Out;
  const p0 = base.plan;
  const choose = async (memory: number, gpu?: number, context = 4096): Promise<PlanJson> =>
    (
      JSON.parse(
        await inspect([
          ds.path,
          "--json",
          "--plan",
          "--memory",
          String(memory),
          "--context",
          String(context),
          ...(gpu !== undefined ? ["--gpu-memory", String(gpu)] : []),
        ]),
      ) as Out
    ).plan;
  const all = p0.loaded_bytes + p0.kv_bytes;
  const resident = p0.resident_bytes + p0.kv_bytes;
  assert.equal((await choose(all, all)).choice, "gpu");
  assert.equal((await choose(all, all - 1)).choice, "gpu-offload");
  assert.equal((await choose(p0.expert_bytes.total, resident)).choice, "gpu-offload");
  assert.equal((await choose(all, resident - 1)).choice, "cpu");
  assert.equal((await choose(all - 1)).choice, "cpu-stream");
  const stream = (await choose(all - 1)).modes.find((m) => m.mode === "cpu-stream")!;
  assert.ok(stream.host_bytes > resident && stream.host_bytes < all);
  assert.ok(stream.disk_bytes_per_token > 0 && stream.disk_bytes_per_token <= p0.expert_bytes.total);
  const none = await choose(stream.host_bytes - 1);
  assert.equal(none.choice, null);
  assert.match(none.reason, /no mode fits.*doctor --low-memory/);
  // the cache grows with the context
  assert.equal((await choose(all, undefined, 1000)).kv_bytes, p0.kv.bytes_per_1k_tokens);
  const text = await inspect([ds.path, "--plan", "--memory", "1G"]);
  assert.match(text, /latent cache: .* per 1k tokens/);
  assert.match(text, /choice: /);
});

test("--memory and --gpu-memory: sizes with units, clear errors", async () => {
  assert.equal(parseByteSize("24G", "--memory"), 24 * 2 ** 30);
  assert.equal(parseByteSize("1.5T", "--memory"), 1.5 * 2 ** 40);
  assert.equal(parseByteSize("80GiB", "--memory"), 80 * 2 ** 30);
  assert.equal(parseByteSize("512m", "--memory"), 512 * 2 ** 20);
  assert.equal(parseByteSize("1000", "--memory"), 1000);
  for (const bad of ["", "-1G", "lots", "12X", "G"])
    assert.throws(() => parseByteSize(bad, "--memory"), UsageError, bad);
  await assert.rejects(inspect([ds.path, "--memory", "8G"]), /--memory needs --plan/);
  await assert.rejects(inspect([ds.path, "--plan", "--gpu-memory", "many"]), /--gpu-memory: expected bytes/);
  await assert.rejects(inspect([ds.path, "--plan", "--context", "0"]), /--context must be an integer/);
});
