// `latent run`: streaming output, --json shape, greedy = generate(), seeded reproducibility, --chat (no double BOS), errors.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { runMain } from "../../src/cli/run.js";
import { GGUFFile } from "../../src/gguf/file.js";
import { writeGGUF } from "../../src/gguf/writer.js";
import { GGUFValueType } from "../../src/gguf/types.js";
import { loadModel } from "../../src/runtime/load.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { generateSync } from "../../src/engine/generate.js";
import { LatentError, UsageError } from "../../src/util/errors.js";
import { FIXTURE_DIR, ROOT, plainMetadata, tempDir, tensorsToWrite } from "../gguf/helpers.js";
import { captureCli, type Captured } from "../helpers/cli.js";

const cli = (argv: string[]): Promise<Captured> => captureCli(runMain, argv);
interface RunJson {
  format: string;
  model: string;
  path: string;
  decode: string;
  seed: number;
  prompt_tokens: number[];
  tokens: number[];
  text: string;
  finish_reason: string;
  stopped_by?: { token: number } | { string: string };
  logprobs: { id: number; token: string; logprob: number; top?: [number, number][] }[];
  timings: Record<string, number>;
}
const runJson = async (argv: string[]): Promise<RunJson> => JSON.parse((await cli([...argv, "--json"])).out) as RunJson;

const M = join(FIXTURE_DIR, "ds2-lite.gguf");
const loaded = loadModel(M);
const tok = Tokenizer.fromMetadata(loaded.file.metadata);
const tmp = tempDir("latent-run-");
after(tmp.cleanup);

test("--json: one object with text, tokens, finish_reason, logprobs and timings", async () => {
  const j = await runJson([M, "-p", "hello world", "-n", "10", "--temp", "0", "--ignore-eos", "--logprobs", "3"]);
  assert.deepEqual(Object.keys(j), [
    "format",
    "model",
    "path",
    "backend",
    "decode",
    "seed",
    "prompt_tokens",
    "tokens",
    "text",
    "finish_reason",
    "logprobs",
    "timings",
  ]);
  assert.equal(j.format, "latent-run/1");
  assert.equal(j.path, "prefill");
  assert.equal(j.decode, "host-sampling", "the CPU model samples every step on the host");
  assert.deepEqual(j.prompt_tokens, tok.encode("hello world"));
  assert.equal(j.tokens.length, 10);
  assert.equal(j.finish_reason, "length");
  assert.equal(j.text, tok.decode(j.tokens, { skipSpecial: true }));
  assert.deepEqual(
    j.logprobs.map((l) => l.id),
    j.tokens,
  );
  for (const l of j.logprobs) {
    assert.equal(l.token, tok.decode([l.id]));
    assert.ok(l.logprob <= 0);
    assert.equal(l.top?.length, 3);
    assert.equal(l.top![0][1], l.logprob, "greedy picks the top alternative");
  }
  for (const k of [
    "load_ms",
    "prompt_tokens",
    "prefill_ms",
    "prompt_tokens_per_second",
    "generated_tokens",
    "decode_steps",
    "decode_ms",
    "tokens_per_second",
  ]) {
    assert.equal(typeof j.timings[k], "number", k);
  }
  assert.equal(j.timings["generated_tokens"], 10);
  assert.equal(j.timings["decode_steps"], 9);
});

test("-n -1 generates until a stop condition (negative numbers are option values)", async () => {
  const j = await runJson([M, "-p", "hello world", "-n", "-1", "--temp", "0"]);
  assert.equal(j.finish_reason, "stop");
  const k = await runJson([M, "-p", "hello world", "--n-predict=-1", "--temp", "0"]);
  assert.deepEqual(k.tokens, j.tokens);
  // a prompt that starts with a dash
  const l = await runJson([M, "-p", "-dash", "-n", "1"]);
  assert.deepEqual(l.prompt_tokens, tok.encode("-dash"));
});

test("greedy run equals generate() and the argmax continuation; --path reference gives the same tokens", async () => {
  const prompt = tok.encode("hello world");
  const want = generateSync(loaded.model, tok, prompt, { temperature: 0, maxTokens: 12, ignoreEog: true });
  for (const path of ["prefill", "reference", "decode"]) {
    const j = await runJson([M, "-p", "hello world", "-n", "12", "--temp", "0", "--ignore-eos", "--path", path]);
    assert.deepEqual(j.tokens, want.tokens, path);
    assert.equal(j.path, path);
  }
});

test("streaming: stdout is the prompt, the text and a newline, timings with tokens/s on stderr", async () => {
  const r = await cli([M, "-p", "hello world", "-n", "15", "--seed", "11"]);
  const j = await runJson([M, "-p", "hello world", "-n", "15", "--seed", "11"]);
  assert.equal(r.out, "hello world" + j.text + "\n");
  assert.match(
    r.err,
    /^loaded in [\d.]+ ms \| prompt: 8 tokens in [\d.]+ ms \([\d.]+ tokens\/s\) \| generated: \d+ tokens, \d+ decode steps in [\d.]+ ms \([\d.]+ tokens\/s\) \| finish: (stop|length) \| path prefill \| backend \S+ \| decode host-sampling \| seed 11\n$/,
  );
});

test("seeded sampling is reproducible; the default seed is random and reported", async () => {
  const args = [
    M,
    "-p",
    "hello",
    "-n",
    "20",
    "--temp",
    "1.2",
    "--top-k",
    "0",
    "--top-p",
    "1",
    "--min-p",
    "0",
    "--ignore-eos",
  ];
  const a = await runJson([...args, "--seed", "5"]);
  const b = await runJson([...args, "--seed", "5"]);
  const c = await runJson([...args, "--seed", "6"]);
  assert.equal(a.seed, 5);
  assert.deepEqual(a.tokens, b.tokens);
  assert.notDeepEqual(a.tokens, c.tokens);
  const d = await runJson(args);
  const e = await runJson([...args, "--seed", String(d.seed)]);
  assert.deepEqual(e.tokens, d.tokens);
});

test("an end-of-generation token ends the run with finish_reason stop", async () => {
  // greedy from "hello world" on ds2-lite reaches EOS (id 1) within 40 tokens
  const free = generateSync(loaded.model, tok, tok.encode("hello world"), {
    temperature: 0,
    maxTokens: 40,
    ignoreEog: true,
  });
  const eos = free.tokens.indexOf(tok.eosId!);
  assert.ok(eos >= 0, "the fixture's greedy continuation contains EOS");
  const j = await runJson([M, "-p", "hello world", "-n", "40", "--temp", "0"]);
  assert.equal(j.finish_reason, "stop");
  assert.deepEqual(j.stopped_by, { token: tok.eosId });
  assert.deepEqual(j.tokens, free.tokens.slice(0, eos));
});

test("--stop cuts the text at a stop string", async () => {
  const free = await runJson([M, "-p", "hello world", "-n", "14", "--temp", "0", "--ignore-eos"]);
  const stop =
    [...free.text]
      .slice(-3)
      .join("")
      .replace(/\uFFFD/g, "") || free.text.slice(-1);
  const j = await runJson([M, "-p", "hello world", "-n", "14", "--temp", "0", "--ignore-eos", "--stop", stop]);
  assert.equal(j.finish_reason, "stop");
  assert.equal(j.text, free.text.slice(0, free.text.indexOf(stop)));
});

test("--chat renders the chat template; BOS is not doubled when the template emits it", async () => {
  const file = GGUFFile.open(M);
  const meta = plainMetadata(file);
  const tpl = (t: string): string => {
    const m = new Map(meta);
    m.set("tokenizer.chat_template", { type: GGUFValueType.STRING, value: t });
    const out = join(tmp.dir, `chat-${m.size}-${t.length}.gguf`);
    writeGGUF(out, m, tensorsToWrite(file));
    return out;
  };
  const body =
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
  const withBos = tpl("{{ bos_token }}" + body);
  const withoutBos = tpl(body);
  const rendered = "<system>be brief\n<user>hi there\n<assistant>";
  const want = tok.encode(rendered, { parseSpecial: true });
  assert.equal(want[0], tok.bosId);
  for (const m of [withBos, withoutBos]) {
    const j = await runJson([m, "-p", "hi there", "--system", "be brief", "--chat", "-n", "3", "--temp", "0"]);
    assert.deepEqual(j.prompt_tokens, want, m);
    assert.equal(j.prompt_tokens.filter((t) => t === tok.bosId).length, 1);
  }
  file.close();
  // the fixture has no chat template: a clear error
  await assert.rejects(
    cli([M, "-p", "hi", "--chat"]),
    (e: unknown) => e instanceof LatentError && /no tokenizer\.chat_template/.test(e.message),
  );
});

test("bad input is a UsageError with a clear message", async () => {
  const cases: [string[], RegExp][] = [
    [[M], /-p\/--prompt is required/],
    [["-p", "x"], /expected one model path, got 0/],
    [["/nonexistent.gguf", "-p", "x"], /model file not found/],
    [[M, "-p", "x", "-n", "abc"], /--n-predict must be an integer/],
    [[M, "-p", "x", "--temp", "-1"], /temperature must be/],
    [[M, "-p", "x", "-n", "-2"], /--n-predict must be an integer ≥ 0 \(or -1\), got "-2"/],
    [[M, "-p", "x", "--top-p", "0"], /topP must be in/],
    [[M, "-p", "x", "--seed", "1.5"], /--seed must be an integer/],
    [[M, "-p", "x", "--path", "fast"], /--path must be prefill, decode or reference/],
    [[M, "-p", "x", "--system", "s"], /--system needs --chat/],
    [[M, "-p", "x", "--nope"], /Unknown option '--nope'/],
    [[M, "-n", "--json", "-p", "x"], /--n-predict must be an integer ≥ 0 \(or -1\), got "--json"/],
  ];
  for (const [argv, re] of cases)
    await assert.rejects(cli(argv), (e: unknown) => e instanceof UsageError && re.test(e.message), argv.join(" "));
});

test("through the binary: streams text to stdout; usage errors exit 2", () => {
  const bin = join(ROOT, "bin", "latent.mjs");
  const ok = spawnSync(process.execPath, [bin, "run", M, "-p", "hello", "-n", "5", "--temp", "0", "--ignore-eos"], {
    encoding: "utf8",
  });
  assert.equal(ok.status, 0, ok.stderr);
  const want = generateSync(loaded.model, tok, tok.encode("hello"), { temperature: 0, maxTokens: 5, ignoreEog: true });
  assert.equal(ok.stdout, "hello" + want.text + "\n", "the prompt is echoed before the generated text");
  assert.match(ok.stderr, /tokens\/s/);
  const quiet = spawnSync(
    process.execPath,
    [bin, "run", M, "-p", "hello", "-n", "5", "--temp", "0", "--ignore-eos", "--no-echo"],
    { encoding: "utf8" },
  );
  assert.equal(quiet.status, 0, quiet.stderr);
  assert.equal(quiet.stdout, want.text + "\n", "--no-echo: only the generated text");
  const bad = spawnSync(process.execPath, [bin, "run", M], { encoding: "utf8" });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /^latent run: -p\/--prompt is required\n$/);
});
