// The page's verdict on a WebGPU adapter (web/adapter.ts): software rasterizers (SwiftShader, lavapipe/llvmpipe, or an
// adapter that calls itself a fallback) keep the CPU worker as the default backend; hardware adapters get WebGPU.
import { test } from "node:test";
import assert from "node:assert/strict";
import { judgeAdapter } from "../../web/adapter.js";

test("adapter: SwiftShader, lavapipe/llvmpipe and fallback adapters are software and default to the CPU worker", () => {
  const software = [
    { vendor: "google", architecture: "swiftshader", description: "" },
    { vendor: "", architecture: "", device: "", description: "SwiftShader Device (Subzero)" },
    { vendor: "mesa", architecture: "", description: "llvmpipe (LLVM 19.1.7, 256 bits)" },
    { vendor: "mesa", architecture: "", device: "lavapipe", description: "" },
    // a browser that hides the names but flags the adapter
    { vendor: "", architecture: "", isFallbackAdapter: true },
  ];
  for (const facts of software) {
    const v = judgeAdapter(facts);
    assert.equal(v.software, true, JSON.stringify(facts));
    assert.equal(v.defaultBackend, "cpu", JSON.stringify(facts));
  }
});

test("adapter: hardware adapters default to WebGPU and are named by what the browser reported", () => {
  const v = judgeAdapter({
    vendor: "nvidia",
    architecture: "ada",
    device: "",
    description: "NVIDIA GeForce RTX 4090",
    isFallbackAdapter: false,
  });
  assert.deepEqual(v, { name: "nvidia ada NVIDIA GeForce RTX 4090", software: false, defaultBackend: "webgpu" });
  assert.equal(judgeAdapter({ vendor: "apple", architecture: "metal-3" }).defaultBackend, "webgpu");
  // a browser without adapter info: nothing says software, so the adapter is taken as hardware
  assert.deepEqual(judgeAdapter(undefined), { name: "available", software: false, defaultBackend: "webgpu" });
  // the same string in two fields is named once
  assert.equal(judgeAdapter({ vendor: "intel", architecture: "gen-12lp", device: "gen-12lp" }).name, "intel gen-12lp");
});
