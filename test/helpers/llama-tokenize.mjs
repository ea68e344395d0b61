#!/usr/bin/env node
// Tokenize texts with llama.cpp (node-llama-cpp) — the oracle for test/tokenizer. Run it in a child process:
// llama.cpp can abort the whole process on bad input.
//
//   node test/helpers/llama-tokenize.mjs MODEL.gguf TEXTS.json [--special] [--both] [--detokenize]
//   node test/helpers/llama-tokenize.mjs --jobs JOBS.json
//
// TEXTS.json is a JSON array of strings. Prints {"ids": [[...], ...]} on stdout: model.tokenize(text, special),
// i.e. llama_tokenize with add_special = false and parse_special = special. --both adds "idsSpecial" (parse_special
// on) next to "ids" (off) from one model load. --detokenize adds "text": model.detokenize(ids, special).
// --jobs takes [{"model": path, "texts": [...]}, ...] and prints one {"ids", "idsSpecial"} per job (one library load).
import { readFileSync } from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const args = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });

async function run(modelPath, texts, special, both, detok) {
  const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
  const ids = texts.map((t) => Array.from(model.tokenize(t, special)));
  const out = { ids };
  if (both) out.idsSpecial = texts.map((t) => Array.from(model.tokenize(t, true)));
  if (detok) out.text = ids.map((x) => model.detokenize(x, special));
  await model.dispose();
  return out;
}

if (args[0] === "--jobs") {
  const jobs = JSON.parse(readFileSync(args[1], "utf8"));
  const results = [];
  for (const job of jobs) results.push(await run(job.model, job.texts, false, true, false));
  process.stdout.write(JSON.stringify(results));
} else {
  const [modelPath, textsPath] = args.filter((a) => !a.startsWith("--"));
  if (modelPath === undefined || textsPath === undefined) {
    console.error(
      "usage: llama-tokenize.mjs MODEL.gguf TEXTS.json [--special] [--both] [--detokenize] | --jobs JOBS.json",
    );
    process.exit(2);
  }
  const texts = JSON.parse(readFileSync(textsPath, "utf8"));
  const out = await run(
    modelPath,
    texts,
    args.includes("--special"),
    args.includes("--both"),
    args.includes("--detokenize"),
  );
  process.stdout.write(JSON.stringify(out));
}
await llama.dispose();
