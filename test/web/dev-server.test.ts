// `npm run web` (the Vite dev server from vite.config.ts) serves the bundled demo model beside the page, by byte
// range as the page's engine reads a model URL, although the file lies in models/, outside the page's root (web/);
// in Debian's headless Chromium the page's demo button loads it from there and continues its prompt.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createServer, type ViteDevServer } from "vite";
import { chromium } from "playwright-core";
import { DEMO_MODEL_PATH, DEMO_PROMPT } from "../../web/demo-model.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const demoBytes = readFileSync(join(ROOT, DEMO_MODEL_PATH));

const CHROMIUM = process.env["LATENT_CHROMIUM"] ?? "/usr/bin/chromium";
if (!existsSync(CHROMIUM) && process.env["LATENT_REQUIRE_BROWSER"] === "1")
  throw new Error(`LATENT_REQUIRE_BROWSER=1 but there is no Chromium at ${CHROMIUM}`);
const noBrowser = existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM} (.ci/run installs Debian's chromium)`;

let server: ViteDevServer;
let base = "";

before(async () => {
  server = await createServer({
    configFile: join(ROOT, "vite.config.ts"),
    logLevel: "silent",
    // no file watching, no hot reload, no dependency discovery: a discovered dependency would reload the page mid-test
    server: { port: 0, hmr: false, watch: null },
    optimizeDeps: { noDiscovery: true },
  });
  await server.listen();
  const address = server.httpServer?.address();
  if (address === null || address === undefined || typeof address === "string")
    throw new Error("the dev server is not listening on a TCP port");
  base = `http://127.0.0.1:${address.port}`;
});

after(async () => {
  await server?.close();
});

const get = (path: string, range?: string): Promise<Response> =>
  fetch(base + path, { headers: range === undefined ? {} : { Range: range } });

test("dev server: the page offers the demo model", async () => {
  const res = await get("/");
  assert.equal(res.status, 200);
  assert.match(await res.text(), /<button id="demo"[^>]*>Try the demo model<\/button>/);
});

test("dev server: the demo model beside the page answers byte ranges with the file's bytes", async () => {
  const url = `/${DEMO_MODEL_PATH}`;
  const size = demoBytes.length;
  const head = await get(url, "bytes=0-3");
  assert.equal(head.status, 206);
  assert.equal(head.headers.get("content-range"), `bytes 0-3/${size}`);
  assert.equal(new TextDecoder().decode(await head.arrayBuffer()), "GGUF");

  const middle = await get(url, "bytes=100000-100999");
  assert.equal(middle.status, 206);
  assert.ok(Buffer.from(await middle.arrayBuffer()).equals(demoBytes.subarray(100000, 101000)));

  const tail = await get(url, "bytes=-16");
  assert.equal(tail.status, 206);
  assert.equal(tail.headers.get("content-range"), `bytes ${size - 16}-${size - 1}/${size}`);
  assert.ok(Buffer.from(await tail.arrayBuffer()).equals(demoBytes.subarray(size - 16)));

  const past = await get(url, `bytes=${size}-`);
  assert.equal(past.status, 416);
  assert.equal(past.headers.get("content-range"), `bytes */${size}`);
  await past.arrayBuffer();

  const whole = await get(url);
  assert.equal(whole.status, 200);
  assert.ok(Buffer.from(await whole.arrayBuffer()).equals(demoBytes));
});

test("dev server: in Chromium the demo button loads the demo model from beside the page and continues its prompt", {
  skip: noBrowser,
}, async () => {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless=new", "--no-sandbox", "--disable-background-networking", "--disable-component-update"],
    headless: true,
  });
  try {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(`${base}/`);
    await page.click("#demo");
    await page.locator("#card table").filter({ hasText: "latent-demo" }).waitFor({ timeout: 120_000 });
    await page.fill("#max-tokens", "8");
    await page.press("#prompt", "Enter");
    const last = page.locator(".msg.model").last();
    await last
      .locator(".stats")
      .filter({ hasText: /tokens\/s/ })
      .waitFor({ timeout: 120_000 });
    assert.ok((await last.locator(".tok").count()) >= 1);
    assert.equal(await last.locator(".prompt").textContent(), DEMO_PROMPT);
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});
