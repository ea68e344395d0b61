/// <reference types="@webgpu/types" />
/**
 * Worker side of FusedGpuModel: owns the device, loads the model from its file (reference kernels: its weights only
 * travel to the GPU), runs whole steps through GpuModel and leaves their logits — or the ids chosen by chained greedy
 * steps and their logprobs — in shared memory.
 */
import { parentPort, workerData } from "node:worker_threads";
import { GGUFFile } from "../../../gguf/file.js";
import { loadModelFrom } from "../../../model/from-file.js";
import { printable } from "../../../util/printable.js";
import { answer } from "../core/blocking-worker.js";
import { requestGpuDevice, type GpuDeviceInfo } from "../core/device.js";
import type { FusedInit, FusedRequest, WarmStats } from "./fused.js";
import { GpuModel } from "../graph/gpu-model.js";
import { GpuRuntime } from "../core/runtime.js";

const init = workerData as FusedInit;
let logits = new Float32Array(init.logits);
let info: GpuDeviceInfo | undefined;
let rt: GpuRuntime | undefined;
let gpu: GpuModel | undefined;

async function handle(req: FusedRequest): Promise<void> {
  switch (req.op) {
    case "device":
      info = await requestGpuDevice();
      answer(init.channel, 1, info.adapterInfo);
      return;
    case "load": {
      rt = new GpuRuntime(info!, { checkWrites: init.checkWrites, activations: init.activations });
      const progress = new Float64Array(init.progress);
      // plain kernels: the weights are only read to travel to the GPU
      // every weight is scanned for NaN/±Inf as it is read, as on the other backends: refused, or loaded with a warning
      const onNonFinite = (message: string): void => void process.stderr.write(`warning: ${printable(message)}\n`);
      const { model } = loadModelFrom(
        GGUFFile.open(req.path),
        (done, total) => {
          progress[0] = done;
          progress[1] = total;
        },
        req.allowNonFinite ? { onNonFinite } : {},
      );
      gpu = new GpuModel(rt, model, {
        slots: req.slots,
        context: req.context,
        maxTokens: req.maxTokens,
        ...(req.pages !== undefined ? { pages: req.pages } : {}),
        ...(req.gpuMemory !== undefined ? { gpuMemory: req.gpuMemory } : {}),
      });
      const t0 = performance.now();
      let kernels = 0;
      if (req.warm !== undefined) {
        progress[2] = 1;
        kernels = await gpu.warm(req.warm, (done, total) => {
          progress[0] = done;
          progress[1] = total;
        });
      }
      const stats: WarmStats = { kernels, compileMs: performance.now() - t0 };
      answer(init.channel, 1, JSON.stringify(stats));
      return;
    }
    case "logits":
      logits = new Float32Array(req.buffer);
      return; // no answer: ordered before the next step
    case "step":
      logits.set(await gpu!.step(req.tokens), 0);
      answer(init.channel, 1);
      return;
    case "picks": {
      const r = await gpu!.stepPicks(req.tokens, req.logits, req.draws);
      const rows = r.ids.length;
      new Uint32Array(logits.buffer, 0, rows).set(r.ids);
      logits.set(r.logprobs, rows);
      logits.set(r.logits, 2 * rows);
      answer(init.channel, 1);
      return;
    }
    case "greedy": {
      const { tokens, logprobs } = await gpu!.decodeGreedy(req.tokens, req.steps, req.draws);
      new Uint32Array(logits.buffer, 0, tokens.length).set(tokens);
      logits.set(logprobs, tokens.length);
      answer(init.channel, 1);
      return;
    }
    case "stats": {
      const st = rt!.stats;
      answer(
        init.channel,
        1,
        JSON.stringify({
          dispatches: st.dispatches,
          encodeMs: st.encodeMs,
          submitMs: st.submitMs,
          ...(gpu?.expertCache !== undefined ? { expertCache: gpu.expertCache.stats } : {}),
        }),
      );
      return;
    }
    case "close":
      info?.device.destroy();
      answer(init.channel, 1);
      return;
  }
}

let queue = Promise.resolve();
parentPort!.on("message", (req: FusedRequest) => {
  queue = queue
    .then(() => handle(req))
    .catch((e: unknown) => answer(init.channel, 2, e instanceof Error ? `${e.name}: ${e.message}` : String(e)));
});
