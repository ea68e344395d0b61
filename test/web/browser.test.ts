// The web page in a real headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core; no browser is
// downloaded): build it with Vite, serve it on 127.0.0.1 with byte ranges, load a synthetic model by URL, check the
// page's logits against the Node CPU reference (≤ 1e-3), chat through the UI (streamed tokens coloured by probability,
// hover alternatives), run the doctor's path check, load the bundled KJV demo model with the page's demo button (from
// the build output) and through the file picker, and continue text with it. Screenshots go to test-artifacts/web/
// (git-ignored).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "vite";
import { chromium, type Browser, type Page } from "playwright-core";
import { loadModel, type LoadedModel } from "../../src/runtime/load.js";
import { evaluateAll } from "../../src/engine/evaluate.js";
import { generateSync } from "../../src/engine/generate.js";
import { Tokenizer } from "../../src/tokenizer/index.js";
import { synthModel } from "../helpers/synth.js";
import { serveStatic, type StaticServer } from "./serve.js";
import { maxAbsDiffFlat as maxAbs } from "../helpers/measure.js";
import { DEMO_MODEL_PATH, DEMO_PROMPT } from "../../web/demo-model.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const DEMO = join(ROOT, "models/latent-demo-kjv.gguf");
const ARTIFACTS = join(ROOT, "test-artifacts/web");
const CHROMIUM = process.env["LATENT_CHROMIUM"] ?? "/usr/bin/chromium";
export const CHROMIUM_ARGS = [
  "--headless=new",
  "--no-sandbox",
  "--enable-unsafe-webgpu",
  "--enable-features=Vulkan",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-quic",
];

interface Hook {
  load(url: string, backend?: "cpu" | "webgpu"): Promise<{ name: string; backend: string }>;
  logits(o: { text?: string; tokens?: number[]; path?: string }): Promise<{ tokens: number[]; logits: number[] }>;
  tokenize(text: string): Promise<number[]>;
  gpu(): Promise<string>;
  backend(): Promise<"cpu" | "webgpu">;
  generate(
    prompt: string,
    opts?: { maxTokens?: number; temperature?: number },
  ): Promise<{ done: { text: string; promptTokens: number } }>;
  newChat(): void;
}
declare const window: { __latent: Hook };

if (!existsSync(CHROMIUM) && process.env["LATENT_REQUIRE_BROWSER"] === "1")
  throw new Error(`LATENT_REQUIRE_BROWSER=1 but there is no Chromium at ${CHROMIUM}`);
const skip = existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM} (.ci/run installs Debian's chromium)`;

let dir = "";
let server: StaticServer;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];
const tiny = synthModel({ label: "web-tiny", base: "tiny", over: {} }, 5);
let ref: LoadedModel;

before(async () => {
  if (skip !== false) return;
  dir = mkdtempSync(join(tmpdir(), "latent-web-"));
  await build({
    configFile: join(ROOT, "vite.config.ts"),
    logLevel: "warn",
    build: { outDir: join(dir, "site"), emptyOutDir: true, sourcemap: false },
  });
  server = await serveStatic(join(dir, "site"), {
    files: { "/models/tiny.gguf": tiny.path, "/models/demo.gguf": DEMO },
  });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
  page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") pageErrors.push(m.text());
  });
  await page.goto(`${server.url}/index.html`);
  await page.waitForFunction(() => "__latent" in window);
  ref = loadModel(tiny.path);
  mkdirSync(ARTIFACTS, { recursive: true });
});

after(async () => {
  await browser?.close();
  await server?.close();
  if (dir !== "") rmSync(dir, { recursive: true, force: true });
  tiny.cleanup();
});

test("browser: a synthetic model loaded by URL gives the Node CPU reference's logits (≤ 1e-3)", { skip }, async (t) => {
  // the CPU worker by name: on a machine with a hardware GPU the page would default to WebGPU
  const info = await page.evaluate(() => window.__latent.load("/models/tiny.gguf", "cpu"));
  assert.equal(info.backend, "plain");
  // once a model is in, the prompt says what to type, not "Load a model"
  assert.doesNotMatch((await page.locator("#prompt").getAttribute("placeholder")) ?? "", /load a model/i);
  await page.locator("#card table").waitFor();
  assert.match(await page.locator("#card").innerText(), /deepseek2/);
  // every read of the model was a range request
  const modelReqs = server.requests.filter((r) => r.path === "/models/tiny.gguf");
  assert.ok(
    modelReqs.length >= 2 && modelReqs.every((r) => r.status === 206 && r.range !== undefined),
    JSON.stringify(modelReqs),
  );

  const tokens = [1, 7, 19, 3, 42, 11, 5, 60, 2, 33];
  const want = evaluateAll(ref.model, tokens, { path: "reference" });
  for (const path of ["prefill", "decode", "reference"]) {
    const got = await page.evaluate((o) => window.__latent.logits(o), { tokens, path });
    assert.deepEqual(got.tokens, tokens);
    const d = maxAbs(got.logits, want.at(-1)!);
    t.diagnostic(`${path}: max |Δ logit| vs Node reference = ${d.toExponential(2)}`);
    assert.ok(d <= 1e-3, `${path}: ${d}`);
  }
  t.diagnostic(await page.evaluate(() => window.__latent.gpu()));
});

test("browser: chat through the UI streams tokens coloured by probability, hover shows the alternatives", {
  skip,
}, async () => {
  const prompt = "the quick brown fox";
  const ids = await page.evaluate((p) => window.__latent.tokenize(p), prompt);
  const tok = Tokenizer.fromMetadata(ref.file.metadata);
  assert.deepEqual(ids, tok.encode(prompt));
  const want = generateSync(ref.model, tok, ids, { temperature: 0, maxTokens: 10 });

  await page.selectOption("#mode", "text");
  await page.fill("#max-tokens", "10");
  await page.fill("#temperature", "0");
  await page.fill("#prompt", prompt);
  await page.press("#prompt", "Enter");
  const stats = page.locator(".msg.model .stats").last();
  await stats.filter({ hasText: /tokens\/s/ }).waitFor({ timeout: 60_000 });
  const spans = page.locator(".msg.model").last().locator(".tok");
  assert.equal(await spans.count(), want.tokens.length);
  // the spans are the tokens' pieces: together they are the generated text
  const shown = (await spans.allTextContents()).join("");
  assert.equal(shown.replace(/∅/g, ""), want.tokens.map((id) => new TextDecoder().decode(tok.tokenBytes(id))).join(""));
  // a continuation is one entry: the prompt it continued, set apart from the generated tokens, then those tokens
  assert.equal(await page.locator("#transcript .msg").count(), 1);
  const body = page.locator(".msg.model").last().locator(".body");
  assert.equal(await body.evaluate((el) => el.firstElementChild?.className), "prompt");
  assert.equal(await body.locator(".prompt").textContent(), prompt);
  assert.equal(await body.textContent(), prompt + shown);
  const weight = (sel: string): Promise<string> =>
    body
      .locator(sel)
      .first()
      .evaluate((el) => getComputedStyle(el).fontWeight);
  assert.equal(await weight(".prompt"), "600");
  assert.equal(await weight(".tok"), "400");
  const bg = await spans
    .first()
    .evaluate((el) => (el as unknown as { style: { background: string } }).style.background);
  assert.match(bg, /rgb|hsl/);
  await spans.first().hover();
  const tip = page.locator("#tooltip");
  await tip.waitFor({ state: "visible" });
  const text = await tip.innerText();
  assert.match(text, /chosen/);
  assert.equal(await tip.locator("tr").count(), 1 + 5); // header + top-5 alternatives
  assert.equal(await tip.locator("tr.chosen").count(), 1); // greedy: the chosen token is among them
  assert.match(await page.locator("#speed").innerText(), /tokens\/s/);
});

test("browser: the doctor's path check panel passes on the loaded model", { skip }, async () => {
  await page.fill("#check-text", "one two three four five six seven eight");
  await page.click("#check");
  const verdict = page.locator("#check-verdict");
  await verdict.waitFor({ timeout: 60_000 });
  assert.equal(await verdict.getAttribute("class"), "ok", await page.locator("#check-result").innerText());
  assert.equal(await page.locator("#check-result tbody tr").count(), 3);
  await page.mouse.move(0, 0);
  await page.screenshot({ path: join(ARTIFACTS, "tiny-model.png"), fullPage: true });
});

test("browser: chat template mode is a conversation: every turn carries the system prompt and the history; New chat forgets it", {
  skip,
}, async () => {
  const tok = Tokenizer.fromMetadata(ref.file.metadata);
  const greedy = (ids: number[]): string => generateSync(ref.model, tok, ids, { temperature: 0, maxTokens: 6 }).text;
  const system = "Answer in one short line.";
  const promptTokensShown = async (): Promise<number> => {
    const stats = page.locator(".msg.model .stats").last();
    await stats.filter({ hasText: /tokens\/s/ }).waitFor({ timeout: 60_000 });
    return Number(/prompt (\d+) tokens/.exec(await stats.innerText())?.[1]);
  };
  await page.evaluate(() => window.__latent.newChat());
  await page.selectOption("#mode", "chat");
  await page.locator("#system").waitFor({ state: "visible" });
  assert.match((await page.locator("#prompt").getAttribute("placeholder")) ?? "", /message/i);
  await page.fill("#system", system);
  await page.fill("#max-tokens", "6");
  await page.fill("#temperature", "0");

  const first = [
    { role: "system", content: system },
    { role: "user", content: "the quick brown fox" },
  ];
  const firstIds = tok.encodeChat(first);
  await page.fill("#prompt", "the quick brown fox");
  await page.press("#prompt", "Enter");
  assert.equal(await promptTokensShown(), firstIds.length);

  // the second turn's prompt is the whole conversation, the model's first reply included
  const second = [...first, { role: "assistant", content: greedy(firstIds) }, { role: "user", content: "jumps over" }];
  await page.fill("#prompt", "jumps over");
  await page.press("#prompt", "Enter");
  assert.equal(await promptTokensShown(), tok.encodeChat(second).length);
  assert.equal(await page.locator(".msg.user").count(), 2);

  await page.click("#new-chat");
  assert.equal(await page.locator("#transcript .msg").count(), 0);
  await page.fill("#prompt", "jumps over");
  await page.press("#prompt", "Enter");
  assert.equal(
    await promptTokensShown(),
    tok.encodeChat([
      { role: "system", content: system },
      { role: "user", content: "jumps over" },
    ]).length,
  );
  await page.fill("#system", "");
  await page.selectOption("#mode", "text");
  assert.equal(await page.locator("#system").isVisible(), false);
});

test("browser: a 420 px wide page opened with a relative ?model= loads it from the page's folder and fits the screen", {
  skip,
}, async () => {
  const narrow = await browser.newPage({ viewport: { width: 420, height: 860 } });
  const errors: string[] = [];
  narrow.on("pageerror", (e) => errors.push(String(e)));
  try {
    const before = server.requests.length;
    // relative to /index.html: /models/tiny.gguf (the worker, in /assets/, would have asked for /assets/models/…)
    await narrow.goto(`${server.url}/index.html?model=models/tiny.gguf`);
    await narrow.locator("#card table").waitFor({ timeout: 60_000 });
    const asked = server.requests.slice(before).map((r) => r.path);
    assert.ok(asked.includes("/models/tiny.gguf"), JSON.stringify(asked));
    assert.ok(!asked.some((p) => p.startsWith("/assets/models/")), JSON.stringify(asked));

    await narrow.selectOption("#mode", "text");
    await narrow.fill("#max-tokens", "12");
    await narrow.fill("#prompt", "the quick brown fox");
    await narrow.press("#prompt", "Enter");
    await narrow
      .locator(".msg.model .stats")
      .filter({ hasText: /tokens\/s/ })
      .waitFor({ timeout: 60_000 });
    await narrow.click("#check");
    await narrow.locator("#check-verdict").waitFor({ timeout: 60_000 });
    await narrow.mouse.move(0, 0);
    await narrow.screenshot({ path: join(ARTIFACTS, "latent-page-420px.png"), fullPage: true });
    // nothing sticks out sideways: the document is no wider than the window, and neither is any panel
    const widths = await narrow.evaluate(() => {
      const doc = (
        globalThis as unknown as {
          document: {
            documentElement: { scrollWidth: number };
            querySelectorAll(s: string): ArrayLike<{ id: string; getBoundingClientRect(): { right: number } }>;
          };
        }
      ).document;
      return {
        scroll: doc.documentElement.scrollWidth,
        panels: Array.from(
          doc.querySelectorAll(".panel, header"),
          (el) => [el.id, Math.round(el.getBoundingClientRect().right)] as const,
        ),
      };
    });
    assert.ok(widths.scroll <= 420, JSON.stringify(widths));
    for (const [id, right] of widths.panels) assert.ok(right <= 420, `${id || "header"} ends at ${right} px`);
    assert.deepEqual(errors, []);
  } finally {
    await narrow.close();
  }
});

test("browser: a software WebGPU adapter is named as such and the CPU worker stays the default; a hardware one gets WebGPU", {
  skip,
}, async () => {
  // navigator.gpu replaced before the page's script runs: the probe sees the adapter info a browser would report
  const withAdapter = async (
    info: Record<string, unknown>,
  ): Promise<{ backend: string; status: string; option: string }> => {
    const p = await browser.newPage();
    const errors: string[] = [];
    p.on("pageerror", (e) => errors.push(String(e)));
    try {
      // as source text: tsx would wrap a function's inner functions in its `__name` helper, which the page lacks
      await p.addInitScript({
        content: `Object.defineProperty(navigator, "gpu", { configurable: true, value: { requestAdapter: () => Promise.resolve({ info: ${JSON.stringify(info)} }) } });`,
      });
      await p.goto(`${server.url}/index.html`);
      await p.waitForFunction(() => "__latent" in window);
      const backend = await p.evaluate(() => window.__latent.backend());
      assert.deepEqual(errors, []);
      return {
        backend,
        status: await p.locator("#backend-status").innerText(),
        option: await p.locator('#backend option[value="webgpu"]').innerText(),
      };
    } finally {
      await p.close();
    }
  };
  const swiftshader = await withAdapter({
    vendor: "google",
    architecture: "swiftshader",
    device: "",
    description: "",
    isFallbackAdapter: true,
  });
  assert.equal(swiftshader.backend, "cpu");
  assert.match(swiftshader.status, /software GPU.*75× slower than the CPU worker/);
  assert.match(swiftshader.option, /75×/);
  const lavapipe = await withAdapter({
    vendor: "mesa",
    architecture: "",
    device: "",
    description: "llvmpipe (LLVM 19.1.7, 256 bits)",
  });
  assert.equal(lavapipe.backend, "cpu");
  const hardware = await withAdapter({
    vendor: "nvidia",
    architecture: "ada",
    device: "",
    description: "NVIDIA GeForce RTX 4090",
    isFallbackAdapter: false,
  });
  assert.equal(hardware.backend, "webgpu");
  assert.doesNotMatch(hardware.status, /software/);
});

test("browser: the build output holds the demo model beside the page, byte for byte", { skip }, () => {
  assert.ok(readFileSync(join(dir, "site", DEMO_MODEL_PATH)).equals(readFileSync(DEMO)));
});

test("browser: one click on “Try the demo model” loads it from beside the page, with progress, ready to continue text", {
  skip,
}, async (t) => {
  const fresh = await browser.newPage({ viewport: { width: 1360, height: 900 } });
  const errors: string[] = [];
  fresh.on("pageerror", (e) => errors.push(String(e)));
  try {
    await fresh.goto(`${server.url}/index.html`);
    await fresh.waitForFunction(() => "__latent" in window);
    // nothing is loaded yet, and the button is there to press
    assert.equal(await fresh.locator("#prompt").isDisabled(), true);
    assert.equal(await fresh.locator("#demo").isVisible(), true);
    // a load that fails gives the button back
    const failed = await fresh.evaluate(() =>
      window.__latent.load("/models/missing.gguf", "cpu").then(
        () => "loaded",
        (e: unknown) => String(e),
      ),
    );
    assert.match(failed, /404/);
    assert.equal(await fresh.locator("#demo").isEnabled(), true);
    // every label the progress bar shows while it is visible, and whether the demo button was disabled then
    await fresh.evaluate(() => {
      const progress = document.getElementById("progress") as HTMLElement;
      const label = progress.querySelector(".label") as HTMLElement;
      const demoButton = document.getElementById("demo") as HTMLButtonElement;
      const seen: { label: string; demoDisabled: boolean }[] = [];
      (window as unknown as { progressSeen: typeof seen }).progressSeen = seen;
      new MutationObserver(() => {
        if (!progress.hidden) seen.push({ label: label.textContent ?? "", demoDisabled: demoButton.disabled });
      }).observe(progress, { subtree: true, childList: true, characterData: true });
    });
    const before = server.requests.length;
    await fresh.click("#demo");
    await fresh.locator("#card table").filter({ hasText: "latent-demo" }).waitFor({ timeout: 60_000 });
    const seen = await fresh.evaluate(
      () => (window as unknown as { progressSeen: { label: string; demoDisabled: boolean }[] }).progressSeen,
    );
    t.diagnostic(`progress: ${seen.length} labels, last ${JSON.stringify(seen.at(-1))}`);
    assert.ok(
      seen.some((s) => /^reading .+ \/ [\d.]+ MiB$/.test(s.label)),
      JSON.stringify(seen),
    );
    assert.ok(
      seen.every((s) => s.demoDisabled),
      JSON.stringify(seen),
    );
    assert.equal(await fresh.locator("#progress").isVisible(), false);
    assert.equal(await fresh.locator("#demo").isEnabled(), true);
    // read from the build output by range requests, at the page's own folder
    const reads = server.requests.slice(before).filter((r) => r.path === `/${DEMO_MODEL_PATH}`);
    assert.ok(reads.length >= 2 && reads.every((r) => r.status === 206), JSON.stringify(reads));

    // ready to continue its sample prompt: press Enter
    assert.equal(await fresh.locator("#mode").inputValue(), "text");
    assert.equal(await fresh.locator("#prompt").inputValue(), DEMO_PROMPT);
    const maxTokens = Number(await fresh.locator("#max-tokens").inputValue());
    assert.equal(await fresh.locator("#temperature").inputValue(), "0");
    assert.equal(await fresh.evaluate(() => document.activeElement?.id), "prompt");
    await fresh.press("#prompt", "Enter");
    const last = fresh.locator(".msg.model").last();
    await last
      .locator(".stats")
      .filter({ hasText: /tokens\/s/ })
      .waitFor({ timeout: 120_000 });
    const demo = loadModel(DEMO);
    const tok = Tokenizer.fromMetadata(demo.file.metadata);
    const want = generateSync(demo.model, tok, tok.encode(DEMO_PROMPT), { temperature: 0, maxTokens });
    const continuation = want.tokens.map((id) => new TextDecoder().decode(tok.tokenBytes(id))).join("");
    const shown = (await last.locator(".tok").allTextContents()).join("").replace(/∅/g, "");
    t.diagnostic(`demo button: ${JSON.stringify(shown)}`);
    assert.equal(shown, continuation);
    assert.equal(await last.locator(".prompt").textContent(), DEMO_PROMPT);
    assert.equal((await last.locator(".body").textContent())?.replace(/∅/g, ""), DEMO_PROMPT + continuation);
    await fresh.mouse.move(0, 0);
    await fresh.screenshot({ path: join(ARTIFACTS, "latent-page-demo-button.png"), fullPage: true });
    assert.deepEqual(errors, []);
  } finally {
    await fresh.close();
  }
});

test("browser: the bundled KJV demo model through the file picker writes King James English", { skip }, async (t) => {
  await page.setInputFiles("#file", DEMO);
  await page
    .locator("#card table")
    .filter({ hasText: "latent-demo" })
    .or(page.locator("#card table").filter({ hasText: /kjv/i }))
    .first()
    .waitFor({ timeout: 60_000 });
  const demo = loadModel(DEMO);
  const tok = Tokenizer.fromMetadata(demo.file.metadata);
  const prompt = "And it came to pass, when the king";
  const want = generateSync(demo.model, tok, tok.encode(prompt), { temperature: 0, maxTokens: 40 });

  await page.selectOption("#mode", "text");
  await page.fill("#max-tokens", "40");
  await page.fill("#temperature", "0");
  await page.fill("#prompt", prompt);
  await page.click("#send");
  const last = page.locator(".msg.model").last();
  await last
    .locator(".stats")
    .filter({ hasText: /tokens\/s/ })
    .waitFor({ timeout: 120_000 });
  const text = (await last.locator(".tok").allTextContents()).join("");
  t.diagnostic(`demo continuation: ${JSON.stringify(text)}`);
  t.diagnostic(`speed: ${await last.locator(".stats").innerText()}`);
  assert.equal(text.replace(/∅/g, ""), want.tokens.map((id) => new TextDecoder().decode(tok.tokenBytes(id))).join(""));
  assert.match(text, /\b(the|and|of|unto|that|his|he)\b/i);
  await last.locator(".tok").nth(3).hover();
  await page.locator("#tooltip").waitFor({ state: "visible" });
  await page.screenshot({ path: join(ARTIFACTS, "latent-page.png"), fullPage: true });
  assert.deepEqual(pageErrors, []);
});

test("browser: WebGPU backend (the engine's fused forward pass on navigator.gpu) matches the Node reference", {
  skip,
}, async (t) => {
  const status = await page.evaluate(() => window.__latent.gpu());
  if (!status.startsWith("WebGPU adapter")) {
    t.skip(status);
    return;
  }
  const info = await page.evaluate(() =>
    (
      window.__latent as unknown as { load(u: string, b: string): Promise<{ backend: string; gpuError?: string }> }
    ).load("/models/tiny.gguf", "webgpu"),
  );
  assert.equal(info.gpuError, undefined);
  assert.match(info.backend, /^WebGPU/);
  const tokens = [1, 7, 19, 3, 42, 11, 5, 60, 2, 33];
  const want = evaluateAll(ref.model, tokens, { path: "reference" }).at(-1)!;
  const got = await page.evaluate((o) => window.__latent.logits(o), { tokens, path: "webgpu" });
  const d = maxAbs(got.logits, want);
  t.diagnostic(`webgpu: max |Δ logit| vs Node reference = ${d.toExponential(2)} (${status})`);
  assert.ok(d <= 1e-3, `webgpu: ${d}`);

  // the KJV demo model on WebGPU: greedy text = the CPU's, tokens/s reported (SwiftShader, a CPU-emulated GPU, is slow)
  await page.evaluate(() =>
    (window.__latent as unknown as { load(u: string, b: string): Promise<unknown> }).load(
      "/models/demo.gguf",
      "webgpu",
    ),
  );
  const demo = loadModel(DEMO);
  const tok = Tokenizer.fromMetadata(demo.file.metadata);
  const prompt = "And it came to pass, when the king";
  const want2 = generateSync(demo.model, tok, tok.encode(prompt), { temperature: 0, maxTokens: 6 });
  await page.selectOption("#mode", "text");
  await page.fill("#max-tokens", "6");
  await page.fill("#temperature", "0");
  await page.fill("#prompt", prompt);
  await page.click("#send");
  const last = page.locator(".msg.model").last();
  await last
    .locator(".stats")
    .filter({ hasText: /tokens\/s/ })
    .waitFor({ timeout: 240_000 });
  const text = (await last.locator(".tok").allTextContents()).join("");
  t.diagnostic(`webgpu demo: ${JSON.stringify(text)}`);
  t.diagnostic(`webgpu speed: ${await last.locator(".stats").innerText()}`);
  assert.equal(text.replace(/∅/g, ""), want2.tokens.map((id) => new TextDecoder().decode(tok.tokenBytes(id))).join(""));
  await page.fill("#check-text", "The LORD is my shepherd");
  await page.click("#check");
  await page.locator("#check-verdict").waitFor({ timeout: 240_000 });
  assert.equal(
    await page.locator("#check-verdict").getAttribute("class"),
    "ok",
    await page.locator("#check-result").innerText(),
  );
  await page.mouse.move(0, 0);
  await page.screenshot({ path: join(ARTIFACTS, "latent-page-webgpu.png"), fullPage: true });
  assert.deepEqual(pageErrors, []);
});
