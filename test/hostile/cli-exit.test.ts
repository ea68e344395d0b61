// The CLI on bad files: one clear line on stderr and exit 1 (2 is for usage errors only), never a stack trace.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { GGUFValueType } from "../../src/gguf/types.js";
import { f32, find, rewriteGGUF, setValues, values } from "../helpers/gguf-rewrite.js";
import { tempDir } from "../gguf/helpers.js";

const DEMO = new URL("../../models/latent-demo-kjv.gguf", import.meta.url).pathname;
const BIN = new URL("../../bin/latent.mjs", import.meta.url).pathname;
const tmp = tempDir("latent-hostile-cli-");
after(tmp.cleanup);

function latent(...args: string[]): { status: number | null; out: string; err: string } {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", timeout: 60_000 });
  return { status: r.status, out: r.stdout, err: r.stderr };
}

/** exit 1, one line on stderr matching `re`, no stack trace */
function fileError(r: { status: number | null; err: string }, re: RegExp, label: string): void {
  assert.equal(r.status, 1, `${label}: exit ${r.status}, stderr ${r.err}`);
  assert.match(r.err, re, label);
  assert.doesNotMatch(r.err, /\n\s+at /, `${label}: stack trace in ${r.err}`);
}

describe("exit codes on bad files", { timeout: 120_000 }, () => {
  const nanNorm = join(tmp.dir, "nan-norm.gguf");
  rewriteGGUF(DEMO, nanNorm, {
    tensors: (list) => {
      const t = find(list, "output_norm.weight");
      const v = values(t);
      v[0] = NaN;
      setValues(t, v);
    },
  });
  const infEps = join(tmp.dir, "inf-eps.gguf");
  rewriteGGUF(DEMO, infEps, { meta: (m) => m.set("deepseek2.attention.layer_norm_rms_epsilon", f32(Infinity)) });

  it("NaN weights: refused naming the tensor (logits, run)", () => {
    fileError(
      latent("logits", nanNorm, "--tokens", "1,2"),
      /^latent logits: tensor "output_norm\.weight" \(F32\) holds NaN/,
      "logits",
    );
    fileError(
      latent("run", nanNorm, "-p", "In the", "-n", "2", "--backend", "reference"),
      /^latent run: tensor "output_norm\.weight"/,
      "run",
    );
  });

  it("NaN weights with --allow-nonfinite: a warning, then NaN logits are a file error (exit 1, not 2)", () => {
    const r = latent("logits", nanNorm, "--tokens", "1,2", "--allow-nonfinite");
    fileError(
      r,
      /warning: tensor "output_norm\.weight".*\n.*latent logits: logits contain NaN/,
      "logits --allow-nonfinite",
    );
  });

  it("an infinite rms epsilon is a load error naming the key (it used to give a uniform distribution and exit 0)", () => {
    fileError(
      latent("logits", infEps, "--tokens", "1,2"),
      /deepseek2\.attention\.layer_norm_rms_epsilon = Infinity/,
      "logits",
    );
  });

  it("a tokenizer with more tokens than the model has logits: a file error (exit 1) in run and logits", () => {
    const path = join(tmp.dir, "long-vocab.gguf");
    rewriteGGUF(DEMO, path, {
      meta: (m) => {
        const tokens = m.get("tokenizer.ggml.tokens")!.value as { elementType: number; values: string[] };
        const types = m.get("tokenizer.ggml.token_type")!.value as { elementType: number; values: ArrayLike<number> };
        m.set("tokenizer.ggml.tokens", {
          type: GGUFValueType.ARRAY,
          value: { elementType: tokens.elementType, values: [...tokens.values, "<｜extra｜>"] },
        });
        m.set("tokenizer.ggml.token_type", {
          type: GGUFValueType.ARRAY,
          value: { elementType: types.elementType, values: [...Array.from(types.values), 3] },
        });
      },
    });
    fileError(
      latent("run", path, "-p", "<｜extra｜>", "-n", "1", "--backend", "reference"),
      /latent run: the tokenizer gave id 4096, outside the model's 4096 logits/,
      "run",
    );
    fileError(latent("logits", path, "--prompt", "<｜extra｜>"), /latent logits: the tokenizer gave id 4096/, "logits");
  });

  it("usage errors still exit 2", () => {
    const r = latent("logits", DEMO, "--tokens", "1,2", "--top", "0");
    assert.equal(r.status, 2, r.err);
  });
});
