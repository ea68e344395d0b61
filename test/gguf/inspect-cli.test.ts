import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { inspectMain, type InspectIO } from "../../src/cli/inspect.js";
import { GGUFFile } from "../../src/gguf/file.js";
import {
  fileTypeName,
  formatSummary,
  INSPECT_FORMAT,
  summarizeModel,
  type InspectSummary,
} from "../../src/gguf/summary.js";
import { writeGGUF, writeModel } from "../../src/gguf/writer.js";
import { GGMLType, GGUFValueType, type GGUFMetadataEntry } from "../../src/gguf/types.js";
import { GGUFError, UsageError } from "../../src/util/errors.js";
import { fixture, MODEL_NAMES, plainMetadata, ROOT, tempDir, tensorsToWrite } from "./helpers.js";

const tmp = tempDir("latent-inspect-");
after(tmp.cleanup);

async function inspect(args: string[]): Promise<{ out: string; err: string }> {
  let out = "";
  let err = "";
  const io: InspectIO = { out: (t) => void (out += t), err: (t) => void (err += t), tty: false };
  await inspectMain(args, io);
  return { out, err };
}

async function inspectJson(args: string[]): Promise<InspectSummary> {
  const { out, err } = await inspect([...args, "--json"]);
  assert.equal(err, "");
  return JSON.parse(out) as InspectSummary;
}

// The documented top-level keys of "latent-inspect/1" (docs/inspect-json.md), in order.
const TOP_KEYS = [
  "format",
  "path",
  "gguf_version",
  "architecture",
  "name",
  "file_type",
  "quantization_version",
  "parameters",
  "size_bytes",
  "tensor_count",
  "tensor_bytes",
  "types",
  "hyperparameters",
  "tokenizer",
  "general",
  "metadata_count",
  "shards",
  "warnings",
];
const TOKENIZER_KEYS = [
  "model",
  "pre",
  "vocab_size",
  "merges",
  "bos_token_id",
  "eos_token_id",
  "eot_token_id",
  "padding_token_id",
  "add_bos_token",
  "add_eos_token",
  "has_chat_template",
];
const TENSOR_KEYS = ["name", "type", "shape", "parameters", "bytes", "shard", "offset"];
const SHARD_KEYS = ["index", "path", "size_bytes", "tensor_count", "tensor_bytes", "metadata_count"];

function checkShape(s: InspectSummary, withTensors: boolean): void {
  assert.deepEqual(Object.keys(s), withTensors ? [...TOP_KEYS, "tensors"] : TOP_KEYS);
  assert.equal(s.format, INSPECT_FORMAT);
  assert.deepEqual(Object.keys(s.tokenizer), TOKENIZER_KEYS);
  for (const sh of s.shards) assert.deepEqual(Object.keys(sh), SHARD_KEYS);
  for (const t of s.types) assert.deepEqual(Object.keys(t), ["type", "tensors", "parameters", "bytes"]);
  assert.equal(
    s.types.reduce((a, t) => a + t.tensors, 0),
    s.tensor_count,
  );
  assert.equal(
    s.types.reduce((a, t) => a + t.bytes, 0),
    s.tensor_bytes,
  );
  assert.equal(
    s.types.reduce((a, t) => a + t.parameters, 0),
    s.parameters,
  );
  assert.equal(
    s.shards.reduce((a, t) => a + t.tensor_count, 0),
    s.tensor_count,
  );
  assert.equal(
    s.shards.reduce((a, t) => a + t.size_bytes, 0),
    s.size_bytes,
  );
  assert.deepEqual(s.warnings, []);
  if (withTensors) {
    assert.equal(s.tensors!.length, s.tensor_count);
    for (const t of s.tensors!) {
      assert.deepEqual(Object.keys(t), TENSOR_KEYS);
      assert.equal(
        t.parameters,
        t.shape.reduce((a, b) => a * b, 1),
      );
    }
    assert.equal(
      s.tensors!.reduce((a, t) => a + t.bytes, 0),
      s.tensor_bytes,
    );
  } else assert.equal(s.tensors, undefined);
}

describe("latent inspect --json on the fixtures", () => {
  for (const model of MODEL_NAMES) {
    it(model, async () => {
      const s = await inspectJson([fixture(model)]);
      checkShape(s, false);
      const file = GGUFFile.open(fixture(model));
      const arch = file.metadata.requireString("general.architecture");
      assert.equal(s.path, fixture(model));
      assert.equal(s.gguf_version, 3);
      assert.equal(s.architecture, arch);
      assert.equal(s.name, file.metadata.requireString("general.name"));
      assert.equal(s.tensor_count, file.tensors.size);
      assert.equal(s.size_bytes, readFileSync(fixture(model)).length);
      assert.equal(s.metadata_count, file.metadata.keys().length);
      assert.equal(s.shards.length, 1);
      assert.equal(s.hyperparameters.embedding_length, file.metadata.requireInteger(`${arch}.embedding_length`));
      assert.equal(s.hyperparameters["attention.kv_lora_rank"], 32 * (model === "ds2-v3-mixed-q" ? 2 : 1));
      assert.equal(s.hyperparameters["rope.scaling.type"], "yarn");
      // every <arch>.* key is shown, the known ones first
      assert.equal(
        Object.keys(s.hyperparameters).length,
        file.metadata.keys().filter((k) => k.startsWith(`${arch}.`)).length,
      );
      assert.equal(Object.keys(s.hyperparameters)[0], "context_length");
      assert.deepEqual(s.tokenizer, {
        model: "gpt2",
        pre: arch === "glm-dsa" ? "glm4" : "deepseek-v3",
        vocab_size: 300,
        merges: 42,
        bos_token_id: 0,
        eos_token_id: 1,
        eot_token_id: null,
        padding_token_id: null,
        add_bos_token: true,
        add_eos_token: false,
        has_chat_template: false,
      });
      if (model === "ds2-v3-mixed-q") {
        assert.deepEqual(s.file_type, { id: 15, name: "MOSTLY_Q4_K_M" });
        assert.deepEqual(
          s.types.map((t) => [t.type, t.tensors]),
          [
            ["Q4_K", 17],
            ["Q6_K", 6],
            ["Q8_0", 12],
            ["F32", 17],
          ],
        );
        assert.equal(s.quantization_version, 2);
      } else {
        assert.deepEqual(s.file_type, { id: 0, name: "ALL_F32" });
        assert.equal(s.types.length, 1);
        assert.equal(s.tensor_bytes, s.parameters * 4);
      }
      if (arch === "glm-dsa") assert.equal(s.hyperparameters["attention.indexer.top_k"], 8);
      assert.equal(s.general.architecture, arch);
      file.close();

      const withTensors = await inspectJson([fixture(model), "--tensors"]);
      checkShape(withTensors, true);
      const embd = withTensors.tensors!.find((t) => t.name === "token_embd.weight")!;
      assert.deepEqual(embd.shape, [s.hyperparameters.embedding_length, 300]);
      assert.equal(embd.shard, 0);
    });
  }
});

describe("latent inspect on split files", () => {
  const src = GGUFFile.open(fixture("ds2-v3-mixed-q"));
  const dir = join(tmp.dir, "split");
  mkdirSync(dir);
  const paths = writeModel(join(dir, "mixed.gguf"), plainMetadata(src), tensorsToWrite(src), {
    maxTensorsPerShard: 20,
  });

  it("every shard shows the whole model", async () => {
    const single = await inspectJson([fixture("ds2-v3-mixed-q"), "--tensors"]);
    for (const p of paths) {
      const s = await inspectJson([p, "--tensors"]);
      checkShape(s, true);
      assert.equal(s.path, p);
      assert.deepEqual(
        s.shards.map((x) => [x.index, x.path, x.tensor_count]),
        [
          [0, paths[0], 20],
          [1, paths[1], 20],
          [2, paths[2], 12],
        ],
      );
      assert.deepEqual(
        s.shards.map((x) => x.metadata_count),
        [single.metadata_count + 3, 3, 3],
      );
      assert.deepEqual(s.hyperparameters, single.hyperparameters);
      assert.deepEqual(s.tokenizer, single.tokenizer);
      assert.deepEqual(s.types, single.types);
      assert.equal(s.parameters, single.parameters);
      assert.deepEqual(s.general.name, single.general.name);
      assert.deepEqual(
        s.tensors!.map((t) => [t.name, t.type, t.shape, t.bytes]),
        single.tensors!.map((t) => [t.name, t.type, t.shape, t.bytes]),
      );
      assert.deepEqual(
        s.tensors!.map((t) => t.shard),
        single.tensors!.map((_, i) => Math.floor(i / 20)),
      );
    }
    const text = (await inspect([paths[1]])).out;
    assert.match(text, /GGUF v3, 3 shards/);
    assert.match(text, /shards \(3\):\n {2}1 {2}.*mixed-00001-of-00003\.gguf {2}20 tensors/);
  });
});

describe("latent inspect text output", () => {
  it("shows the summary sections", async () => {
    const { out } = await inspect([fixture("ds2-v3")]);
    for (const re of [
      /^file +.*ds2-v3\.gguf \(1\.65 MiB, GGUF v3\)$/m,
      /^architecture +deepseek2$/m,
      /^name +tiny-ds2-v3-random$/m,
      /^file type +ALL_F32 \(0\)$/m,
      /^tensors +65, /m,
      /^ {2}F32 +65 tensors/m,
      /^ {2}expert_gating_func +2 \(sigmoid\)$/m,
      /^ {2}attention\.layer_norm_rms_epsilon +0\.000001$/m,
      /^ {2}rope\.scaling\.yarn_log_multiplier +0\.1$/m,
      /^ {2}expert_group_count +4$/m,
      /^ {2}model \/ pre +gpt2 \/ deepseek-v3$/m,
      /^ {2}chat template +no$/m,
    ])
      assert.match(out, re);
    assert.doesNotMatch(out, /tensors:\n/);
    const withTensors = (await inspect([fixture("ds2-v3"), "--tensors"])).out;
    assert.match(withTensors, /^ {2}blk\.3\.ffn_down_exps\.weight +F32 +\[40, 64, 16\] +163840 +1$/m);
  });

  it("--help", async () => {
    const { out } = await inspect(["--help"]);
    assert.match(out, /^usage: latent inspect MODEL\.gguf \[--json\] \[--tensors\]/);
  });
});

describe("latent inspect errors", () => {
  it("bad arguments are UsageErrors", async () => {
    await assert.rejects(
      inspect([]),
      (e: Error) => e instanceof UsageError && /missing the model file/.test(e.message),
    );
    await assert.rejects(
      inspect(["a.gguf", "b.gguf"]),
      (e: Error) => e instanceof UsageError && /expected one model file, got 2/.test(e.message),
    );
    await assert.rejects(
      inspect([fixture("ds2-lite"), "--frobnicate"]),
      (e: Error) => e instanceof UsageError && /Unknown option '--frobnicate'/.test(e.message),
    );
    await assert.rejects(inspect([fixture("ds2-lite"), "--json=yes"]), UsageError);
    await assert.rejects(
      inspect([join(tmp.dir, "nope.gguf")]),
      (e: Error) => e instanceof UsageError && /model file not found: .*nope\.gguf/.test(e.message),
    );
    await assert.rejects(inspect([tmp.dir]), (e: Error) => e instanceof UsageError && /is a directory/.test(e.message));
  });

  it("a corrupt file is a GGUFError", async () => {
    const p = join(tmp.dir, "corrupt.gguf");
    writeFileSync(p, readFileSync(fixture("ds2-lite")).subarray(0, 5000));
    await assert.rejects(inspect([p]), GGUFError);
  });

  it("exit codes and messages through main()", () => {
    const corrupt = join(tmp.dir, "corrupt2.gguf");
    writeFileSync(corrupt, "GGUF\u0004\u0000\u0000\u0000");
    // A script file, not `node -e`: node would take a leading "inspect" argument for its debugger.
    const runner = join(tmp.dir, "run-main.mjs");
    writeFileSync(
      runner,
      `const { main } = await import(${JSON.stringify(pathToFileURL(join(ROOT, "src/cli/main.ts")).href)});\nawait main(process.argv.slice(2));\n`,
    );
    const run = (args: string[]): { status: number | null; stdout: string; stderr: string } => {
      const r = spawnSync(process.execPath, ["--import", "tsx", runner, ...args], {
        cwd: ROOT,
        encoding: "utf8",
        timeout: 60_000,
      });
      return { status: r.status, stdout: r.stdout, stderr: r.stderr };
    };
    const ok = run(["inspect", fixture("ds2-lite"), "--json"]);
    assert.equal(ok.status, 0, ok.stderr);
    assert.equal((JSON.parse(ok.stdout) as InspectSummary).format, "latent-inspect/1");
    const usage = run(["inspect", "--bogus"]);
    assert.equal(usage.status, 2);
    assert.match(usage.stderr, /^latent inspect: Unknown option '--bogus'/);
    const missing = run(["inspect", join(tmp.dir, "missing.gguf")]);
    assert.equal(missing.status, 2);
    assert.match(missing.stderr, /model file not found/);
    const bad = run(["inspect", corrupt]);
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /^latent inspect: .*corrupt2\.gguf: unsupported GGUF version 4/);
    assert.equal(bad.stdout, "");
  });
});

describe("summarizeModel", () => {
  it("turns odd metadata into warnings, never errors", () => {
    const meta = new Map<string, GGUFMetadataEntry>([
      ["general.architecture", { type: GGUFValueType.STRING, value: "deepseek2" }],
      ["general.name", { type: GGUFValueType.UINT32, value: 5 }],
      ["general.file_type", { type: GGUFValueType.INT32, value: -3 }],
      ["deepseek2.block_count", { type: GGUFValueType.UINT64, value: 2n ** 60n }],
      [
        "deepseek2.attention.head_count",
        { type: GGUFValueType.ARRAY, value: { elementType: GGUFValueType.INT32, values: [4, 4, 8] } },
      ],
      [
        "deepseek2.huge",
        {
          type: GGUFValueType.ARRAY,
          value: { elementType: GGUFValueType.UINT8, values: new Array<number>(100).fill(1) },
        },
      ],
      ["deepseek2.f", { type: GGUFValueType.FLOAT32, value: Number.NaN }],
      ["tokenizer.ggml.bos_token_id", { type: GGUFValueType.STRING, value: "zero" }],
      ["tokenizer.ggml.tokens", { type: GGUFValueType.UINT8, value: 3 }],
      ["tokenizer.chat_template", { type: GGUFValueType.STRING, value: "{{ messages }}" }],
    ]);
    const p = join(tmp.dir, "odd.gguf");
    writeGGUF(p, meta, [{ name: "w", ne: [4], type: GGMLType.F32, data: new Uint8Array(16) }]);
    const f = GGUFFile.open(p);
    const s = summarizeModel(f, { tensors: true, hfNames: (n) => (n === "w" ? ["model.w", "model.w2"] : undefined) });
    f.close();
    assert.equal(s.name, null);
    assert.equal(s.file_type, null);
    assert.equal(s.tokenizer.bos_token_id, null);
    assert.equal(s.tokenizer.vocab_size, null);
    assert.equal(s.tokenizer.has_chat_template, true);
    assert.equal(s.hyperparameters.block_count, "1152921504606846976");
    assert.deepEqual(s.hyperparameters["attention.head_count"], [4, 4, 8]);
    assert.deepEqual(s.hyperparameters.huge, { array: "UINT8", length: 100 });
    assert.equal(s.hyperparameters.f, "NaN");
    assert.equal(s.warnings.length, 4);
    assert.match(s.warnings.join("\n"), /"general\.name" should be a string/);
    assert.deepEqual(s.tensors![0].hf_names, ["model.w", "model.w2"]);
    const text = formatSummary(s);
    assert.match(text, /^warnings:$/m);
    assert.match(text, /hf name/);
    assert.match(text, /model\.w … \(2\)/);
    assert.equal(JSON.parse(JSON.stringify(s)).format, INSPECT_FORMAT);
  });

  it("names llama.cpp file types", () => {
    assert.equal(fileTypeName(0), "ALL_F32");
    assert.equal(fileTypeName(1), "MOSTLY_F16");
    assert.equal(fileTypeName(7), "MOSTLY_Q8_0");
    assert.equal(fileTypeName(15), "MOSTLY_Q4_K_M");
    assert.equal(fileTypeName(18), "MOSTLY_Q6_K");
    assert.equal(fileTypeName(32), "MOSTLY_BF16");
    assert.equal(fileTypeName(38), "MOSTLY_MXFP4_MOE");
    assert.equal(fileTypeName(1024), "GUESSED");
    assert.equal(fileTypeName(999), "unknown(999)");
  });

  it("reports header progress while reading", () => {
    const seen: { keysDone: number; keyCount: number; tensorsDone: number; tensorCount: number; bytes: number }[] = [];
    GGUFFile.open(fixture("ds2-v3"), { onProgress: (p) => seen.push(p) }).close();
    assert.ok(seen.length > 10);
    const last = seen.at(-1)!;
    assert.equal(last.keysDone, last.keyCount);
    assert.equal(last.tensorsDone, last.tensorCount);
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i].bytes >= seen[i - 1].bytes);
  });
});
