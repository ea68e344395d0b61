#!/usr/bin/env node
// llama.cpp timing harness (node-llama-cpp, CPU only), run by bench/cpu.ts in a child process:
//   node bench/llama-timing.mjs MODEL.gguf --threads 2 --prompt 512 --decode 128
// Evaluates a `--prompt`-token prompt in one batch, then `--decode` single-token steps (greedy), after a short
// warm-up, and prints one JSON line {prefill_s, decode_s, step_ms_min, step_ms_median, step_ms_p90, prompt, decode,
// threads, cpu_backend} (the decode step times show a collapse of llama.cpp's spin-waiting threads on a loaded machine).
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { performance } from "node:perf_hooks";
import path from "node:path";

const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const modelPath = args[0];
const threads = opt("threads", 2);
const nPrompt = opt("prompt", 512);
const nDecode = opt("decode", 128);

let cpuBackend = "?";
const llama = await getLlama({
  gpu: false,
  build: "never",
  logLevel: LlamaLogLevel.debug,
  maxThreads: 0,
  logger(_level, message) {
    const m = /loaded CPU backend from (\S+)/.exec(message);
    if (m) cpuBackend = path.basename(m[1]);
  },
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const nVocab = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? 1000;
let s = 12345;
const tokens = Array.from({ length: nPrompt }, () => {
  s = (s * 1103515245 + 12345) >>> 0;
  return 10 + (s % (nVocab - 10));
});

async function run(prompt, steps) {
  const context = await model.createContext({
    contextSize: prompt.length + steps + 8,
    batchSize: Math.max(prompt.length, 1),
    threads,
    sequences: 1,
  });
  try {
    const seq = context.getSequence();
    const t0 = performance.now();
    const items = prompt.map((t, i) => [t, i === prompt.length - 1 ? { generateNext: { token: true } } : {}]);
    const res = await seq.controlledEvaluate(items);
    let next = res[prompt.length - 1]?.next?.token ?? prompt[0];
    const t1 = performance.now();
    const stepMs = [];
    for (let i = 0; i < steps; i++) {
      const s0 = performance.now();
      const r = await seq.controlledEvaluate([[next, { generateNext: { token: true } }]]);
      next = r[0]?.next?.token ?? next;
      stepMs.push(performance.now() - s0);
    }
    const t2 = performance.now();
    stepMs.sort((a, b) => a - b);
    const at = (q) => stepMs[Math.min(stepMs.length - 1, Math.floor(q * stepMs.length))] ?? 0;
    return {
      prefill_s: (t1 - t0) / 1000,
      decode_s: (t2 - t1) / 1000,
      step_ms_min: stepMs[0] ?? 0,
      step_ms_median: at(0.5),
      step_ms_p90: at(0.9),
    };
  } finally {
    await context.dispose();
  }
}

await run(tokens.slice(0, 16), 4); // warm-up
const r = await run(tokens, nDecode);
console.log(JSON.stringify({ ...r, prompt: nPrompt, decode: nDecode, threads, cpu_backend: cpuBackend }));
await model.dispose();
await llama.dispose();
