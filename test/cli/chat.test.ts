// `latent chat`: turns from piped stdin or a file, replies streamed through the chat template, the conversation kept in
// the KV cache between turns (only the new message is prefilled), /reset, /stats, /exit.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { loadModel, closeLoaded } from "../../src/runtime/load.js";
import { Tokenizer, type ChatMessage } from "../../src/tokenizer/index.js";
import { Sampler } from "../../src/engine/sampler.js";
import { generateSync } from "../../src/engine/generate.js";
import { ChatSession } from "../../src/cli/chat-session.js";
import { FIXTURE_DIR, ROOT, tempDir } from "../gguf/helpers.js";

const BIN = join(ROOT, "bin", "latent.mjs");
const DEMO = join(ROOT, "models", "latent-demo-kjv.gguf");
const tmp = tempDir("latent-chat-");
after(tmp.cleanup);

const chat = (args: string[], input: string): { status: number | null; stdout: string; stderr: string } =>
  spawnSync(process.execPath, [BIN, "chat", DEMO, "--temp", "0", "-n", "8", "--backend", "reference", ...args], {
    input,
    encoding: "utf8",
  });

/** The numbers of each "last turn:" line of /stats. */
function statsOf(stderr: string): { conversation: number; reused: number; prefilled: number }[] {
  return [
    ...stderr.matchAll(/last turn: conversation (\d+) tokens, (\d+) reused from the cache, (\d+) prefilled/g),
  ].map((m) => ({ conversation: Number(m[1]), reused: Number(m[2]), prefilled: Number(m[3]) }));
}

test("piped stdin: each line a turn; the second turn prefills only the new message; /exit ends the session", () => {
  const r = chat(
    ["--system", "You are a preacher."],
    "Who was Moses?\n/stats\nAnd what did he say?\n/stats\n/exit\nnever answered\n/stats\n",
  );
  assert.equal(r.status, 0, r.stderr);
  assert.doesNotMatch(r.stderr, /type a message/, "not interactive: no greeting");
  assert.ok(r.stdout.endsWith("\n") && r.stdout.trim() !== "", JSON.stringify(r.stdout));
  const stats = statsOf(r.stderr);
  assert.equal(stats.length, 2, "nothing after /exit runs");
  const [first, second] = stats;
  assert.ok(first !== undefined && second !== undefined, r.stderr);
  assert.equal(first.reused, 0);
  assert.equal(first.prefilled, first.conversation);
  assert.ok(
    second.reused >= first.conversation,
    `the whole first turn comes from the cache: ${JSON.stringify(second)}`,
  );
  assert.equal(second.reused + second.prefilled, second.conversation);
  assert.match(r.stderr, /turns: 2, cache: \d+ positions/);
});

test("-f FILE and -f -: /reset forgets the conversation and empties the cache; unknown commands are reported", () => {
  const file = join(tmp.dir, "turns.txt");
  writeFileSync(file, "In the beginning\n/reset\n/stats\n/frobnicate\nIn the beginning\n/stats\n");
  const r = chat(["-f", file], "");
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /\(conversation reset\)\nturns: 0, cache: 0 positions\n/);
  assert.match(r.stderr, /unknown command \/frobnicate/);
  const dash = chat(["-f", "-"], "In the beginning\n/stats\n");
  assert.equal(dash.status, 0, dash.stderr);
  assert.equal(dash.stdout, r.stdout.slice(0, r.stdout.length / 2), "-f - reads the turns from stdin");
  assert.match(dash.stderr, /turns: 1, /);
  const [after] = statsOf(r.stderr);
  assert.equal(after?.reused, 0, "after /reset nothing is reused");
  // each reply is followed by a newline (a reply may hold newlines of its own)
  const half = r.stdout.length / 2;
  assert.equal(
    r.stdout.slice(0, half),
    r.stdout.slice(half),
    "the same first message after /reset gets the same greedy reply",
  );
});

test("a reply over the cached conversation equals generating from the whole conversation afresh", async () => {
  const loaded = loadModel(DEMO, undefined, { backend: "reference" });
  try {
    const tok = Tokenizer.fromMetadata(loaded.file.metadata);
    const session = new ChatSession(loaded.model, tok, {
      system: "Be brief.",
      sampler: new Sampler({ temperature: 0 }),
      maxTokens: 10,
    });
    const messages: ChatMessage[] = [{ role: "system", content: "Be brief." }];
    for (const text of ["Who was Moses?", "And Aaron?", "What of Egypt?"]) {
      messages.push({ role: "user", content: text });
      const want = generateSync(loaded.model, tok, tok.encodeChat(messages), { temperature: 0, maxTokens: 10 });
      let streamed = "";
      const turn = await session.send(text, (t) => void (streamed += t));
      assert.deepEqual(turn.result.tokens, want.tokens, text);
      assert.equal(streamed, want.text);
      messages.push({ role: "assistant", content: want.text });
    }
    assert.ok(session.turns[2].reusedTokens > 0);
  } finally {
    closeLoaded(loaded);
  }
});

test("a model without a chat template, and bad options, are clear errors", () => {
  const r = spawnSync(process.execPath, [BIN, "chat", join(FIXTURE_DIR, "ds2-lite.gguf")], {
    input: "hi\n",
    encoding: "utf8",
  });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /^latent chat: .*chat_template/);
  assert.doesNotMatch(r.stderr, /\n\s+at /);
  const noModel = spawnSync(process.execPath, [BIN, "chat", join(tmp.dir, "nope.gguf")], {
    input: "hi\n",
    encoding: "utf8",
  });
  assert.equal(noModel.status, 2);
  assert.match(noModel.stderr, /^latent chat: model file not found/);
  const missing = chat(["-f", join(tmp.dir, "nope.txt")], "");
  assert.equal(missing.status, 2);
  assert.match(missing.stderr, /prompt file not found/);
  const backend = chat(["--backend", "webgpu"], "");
  assert.equal(backend.status, 2);
  assert.match(backend.stderr, /--backend must be cpu or reference for chat/);
});
