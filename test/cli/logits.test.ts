// `latent logits`: the --full JSON rows equal llama.cpp's log-probs on every path; --top agrees with --full; errors.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { logitsMain, parseTokenList, LOGITS_FORMAT } from "../../src/cli/logits.js";
import { GGUFFile } from "../../src/gguf/file.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { UsageError } from "../../src/util/errors.js";
import { FIXTURE_DIR, MODEL_NAMES, ROOT } from "../gguf/helpers.js";
import { maxAbsDiff } from "../helpers/logprobs.js";
import { captureCli, type Captured } from "../helpers/cli.js";

const cli = (argv: string[]): Promise<Captured> => captureCli(logitsMain, argv);
interface LogitsJson {
  format: string;
  path: string;
  n_vocab: number;
  kind: string;
  tokens: number[];
  logprobs: ((number | null)[] | [number, number | null][])[];
}
const json = async (argv: string[]): Promise<LogitsJson> =>
  JSON.parse((await cli([...argv, "--json"])).out) as LogitsJson;

interface KitCase {
  tokens: number[];
  logprobs: (number | null)[][];
  logprobs_f32_weights?: (number | null)[][];
}
const gguf = (name: string): string => join(FIXTURE_DIR, `${name}.gguf`);
const TOL = 1e-4;

for (const name of MODEL_NAMES) {
  const expected = JSON.parse(readFileSync(join(FIXTURE_DIR, `${name}.expected.json`), "utf8")) as { cases: KitCase[] };
  const kc = expected.cases[0];
  const want = kc.logprobs_f32_weights ?? kc.logprobs;
  const tokens = kc.tokens.slice(0, 24);
  for (const [path, extra] of [
    ["reference", []],
    ["prefill", ["--chunk", "5"]],
    ["decode", []],
  ] as const) {
    test(`${name}: logits --full --json on ${path} equals llama.cpp's log-probs`, async () => {
      const j = await json([gguf(name), "--tokens", tokens.join(","), "--path", path, ...extra, "--full"]);
      assert.equal(j.format, LOGITS_FORMAT);
      assert.equal(j.path, path);
      assert.equal(j.kind, "full");
      assert.deepEqual(j.tokens, tokens);
      assert.equal(j.logprobs.length, tokens.length);
      const rows = j.logprobs as (number | null)[][];
      for (const r of rows) assert.equal(r.length, j.n_vocab);
      assert.ok(
        rows.every((r) => r.every((x) => x !== null)),
        "finite logits give no nulls",
      );
      const d = maxAbsDiff(rows as number[][], want.slice(0, tokens.length));
      assert.ok(d <= TOL, `max |Δ logprob| = ${d}`);
    });
  }
}

test("--top K is the K best of --full, sorted, ties to the lower id; default K is 5", async () => {
  const m = gguf("ds2-v3");
  const full = (await json([m, "--tokens", "0 17 42 99 250", "--full"])).logprobs as number[][];
  const top = (await json([m, "--tokens", "[0, 17, 42, 99, 250]", "--top", "7"])).logprobs as [number, number][][];
  const dflt = (await json([m, "--tokens", "0,17,42,99,250"])).logprobs as [number, number][][];
  assert.equal(top.length, 5);
  top.forEach((pairs, i) => {
    const row = full[i];
    const order = row.map((x, id) => [id, x] as [number, number]).sort((a, b) => b[1] - a[1] || a[0] - b[0]);
    assert.deepEqual(pairs, order.slice(0, 7));
    assert.deepEqual(dflt[i], order.slice(0, 5));
  });
});

test("--prompt encodes with the model's tokenizer (one BOS), same rows as --tokens", async () => {
  const m = gguf("ds2-lite");
  const file = GGUFFile.open(m);
  const ids = Tokenizer.fromMetadata(file.metadata).encode("hello world");
  file.close();
  const a = await json([m, "--prompt", "hello world", "--top", "3"]);
  assert.deepEqual(a.tokens, ids);
  assert.equal(a.tokens.filter((t) => t === 0).length, 1);
  const b = await json([m, "--tokens", ids.join(","), "--top", "3"]);
  assert.deepEqual(a.logprobs, b.logprobs);
  // a prompt that already starts with the BOS text gets no second BOS
  const c = await json([m, "--prompt", "<｜begin▁of▁sentence｜>hello world", "--top", "3"]);
  assert.deepEqual(c.tokens, ids);
});

test("stderr reports tokens/s; the table form has one line per position and a perplexity", async () => {
  const m = gguf("ds2-lite");
  const r = await cli([m, "--tokens", "0,5,7,9", "--path", "prefill"]);
  assert.match(r.err, /^logits: 4 tokens in [\d.]+ ms \([\d.]+ tokens\/s, path prefill, chunk 256\)\n$/);
  const lines = r.out.trim().split("\n");
  assert.equal(lines.length, 1 + 4 + 1);
  assert.match(lines[1], /^\s+0\s+0\s/);
  assert.match(lines[5], /perplexity/);
});

test("parseTokenList accepts commas, spaces and brackets and rejects the rest", () => {
  assert.deepEqual(parseTokenList("1,2,3", 10), [1, 2, 3]);
  assert.deepEqual(parseTokenList(" 1, 2 ,3 ", 10), [1, 2, 3]);
  assert.deepEqual(parseTokenList("[4 5 6]", 10), [4, 5, 6]);
  for (const bad of ["", "[]", "1,,2", "1,x", "-1", "1.5", "2,", "0x10", "1e2"])
    assert.throws(() => parseTokenList(bad, 1000), UsageError, bad);
  assert.throws(() => parseTokenList("1,10", 10), /token id 10 \(entry 1\) is outside the vocabulary \(0\.\.9\)/);
});

test("bad input is a UsageError with a clear message", async () => {
  const m = gguf("ds2-lite");
  const cases: [string[], RegExp][] = [
    [[m, "--tokens", "0,300"], /token id 300 .* outside the vocabulary \(0\.\.299\)/],
    [[m, "--tokens", "0,a,2"], /entry 1 "a" is not a token id/],
    [[m], /exactly one of --tokens and --prompt/],
    [[m, "--tokens", "1", "--prompt", "x"], /exactly one of --tokens and --prompt/],
    [["/nonexistent/model.gguf", "--tokens", "1"], /model file not found: \/nonexistent\/model\.gguf/],
    [["--tokens", "1"], /expected one model path, got 0/],
    [[m, "--tokens", "1", "--full", "--top", "3"], /at most one of --full and --top/],
    [[m, "--tokens", "1", "--top", "0"], /--top must be an integer ≥ 1/],
    [[m, "--tokens", "1", "--path", "fast"], /--path must be reference, prefill or decode/],
    [[m, "--tokens", "1", "--chunk", "4"], /--chunk applies to --path prefill only/],
    [[m, "--tokens", "1", "--bogus"], /Unknown option '--bogus'/],
  ];
  for (const [argv, re] of cases)
    await assert.rejects(cli(argv), (e: unknown) => e instanceof UsageError && re.test(e.message), argv.join(" "));
});

test("through the binary: JSON on stdout, tokens/s on stderr, usage errors exit 2 with one line", () => {
  const bin = join(ROOT, "bin", "latent.mjs");
  const ok = spawnSync(
    process.execPath,
    [bin, "logits", gguf("ds2-lite"), "--tokens", "0,1,2", "--json", "--top", "2"],
    { encoding: "utf8" },
  );
  assert.equal(ok.status, 0, ok.stderr);
  const j = JSON.parse(ok.stdout) as LogitsJson;
  assert.deepEqual(j.tokens, [0, 1, 2]);
  assert.equal(j.logprobs.length, 3);
  assert.match(ok.stderr, /tokens\/s/);
  const bad = spawnSync(process.execPath, [bin, "logits", gguf("ds2-lite"), "--tokens", "0,999"], { encoding: "utf8" });
  assert.equal(bad.status, 2);
  assert.equal(bad.stdout, "");
  assert.match(
    bad.stderr,
    /^latent logits: --tokens: token id 999 \(entry 1\) is outside the vocabulary \(0\.\.299\)\n$/,
  );
});
