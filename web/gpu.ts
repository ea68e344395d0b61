/// <reference types="@webgpu/types" />
// The page's WebGPU backend: the engine's fused WebGPU forward pass (src/backend/webgpu/gpu-model.ts: weights resident
// in their GGUF blocks, the latent cache on the GPU, one submission per step) on the browser's navigator.gpu, driven
// from the worker with the engine's sampler and streaming detokenizer.
import { adapterName, deviceDescriptor, type GpuDeviceInfo } from "../src/backend/webgpu/core/device.js";
import { GpuRuntime } from "../src/backend/webgpu/core/runtime.js";
import { GpuModel } from "../src/backend/webgpu/graph/gpu-model.js";
import { createSampler } from "../src/engine/sampler.js";
import type { LatentModel } from "../src/index.js";

export interface GpuToken {
  readonly id: number;
  readonly text: string;
  readonly logprob: number;
  readonly top: readonly [number, number][];
}

export interface GpuGenerateOptions {
  readonly maxTokens: number;
  readonly temperature: number;
  readonly topK: number;
  readonly topP: number;
  readonly seed: number;
  readonly logprobs: number;
  readonly signal: AbortSignal;
}

export interface GpuResult {
  readonly tokens: number;
  readonly text: string;
  readonly finishReason: "stop" | "length" | "abort";
  readonly prefillMs: number;
  readonly decodeMs: number;
  readonly decodeSteps: number;
}

/** A device from this browser's navigator.gpu (with the adapter's full storage limits), as the engine's runtime wants it. */
async function browserDevice(): Promise<GpuDeviceInfo> {
  const gpu = (navigator as Navigator & { gpu?: GPU }).gpu;
  if (gpu === undefined) throw new Error("this browser exposes no WebGPU (navigator.gpu)");
  const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" });
  if (adapter === null) throw new Error("no WebGPU adapter");
  const device = await adapter.requestDevice(deviceDescriptor(adapter));
  return {
    device,
    gpu,
    adapterInfo: adapterName(adapter.info),
    features: new Set([...device.features]),
    limits: {
      maxStorageBufferBindingSize: device.limits.maxStorageBufferBindingSize,
      maxBufferSize: device.limits.maxBufferSize,
      maxComputeWorkgroupStorageSize: device.limits.maxComputeWorkgroupStorageSize,
      maxComputeWorkgroupsPerDimension: device.limits.maxComputeWorkgroupsPerDimension,
      maxStorageBuffersPerShaderStage: device.limits.maxStorageBuffersPerShaderStage,
    },
  };
}

const CHUNK = 64;

export class GpuSession {
  private constructor(
    readonly adapter: string,
    private readonly gm: GpuModel,
    private readonly m: LatentModel,
    readonly context: number,
  ) {}

  static async create(m: LatentModel, context = Math.min(m.config.contextLength, 256)): Promise<GpuSession> {
    const info = await browserDevice();
    const rt = new GpuRuntime(info);
    const gm = new GpuModel(rt, m.model, { slots: 1, context, maxTokens: CHUNK });
    return new GpuSession(info.adapterInfo, gm, m, context);
  }

  /** Next-token logits after every position of `tokens` (prefill chunks on the GPU). */
  async logitsAll(tokens: readonly number[]): Promise<Float32Array[]> {
    return (await this.gm.prefill(0, tokens, 0, true)).map((r) => Float32Array.from(r));
  }

  async *generate(prompt: readonly number[], o: GpuGenerateOptions): AsyncGenerator<GpuToken, GpuResult, void> {
    if (prompt.length >= this.context) throw new Error(`the prompt has ${prompt.length} tokens; the WebGPU session holds ${this.context}`);
    const tok = this.m.tokenizer;
    const sampler = createSampler({ temperature: o.temperature, topK: o.topK, topP: o.topP, seed: o.seed, logprobs: o.logprobs });
    const dec = tok.createDecoder();
    let t0 = performance.now();
    let logits = (await this.gm.prefill(0, prompt, 0, false)).at(-1)!;
    const prefillMs = performance.now() - t0;
    t0 = performance.now();
    let text = "";
    let n = 0;
    let steps = 0;
    let pos = prompt.length;
    let finish: GpuResult["finishReason"] = "length";
    while (n < o.maxTokens && pos < this.context) {
      if (o.signal.aborted) {
        finish = "abort";
        break;
      }
      const s = sampler.sample(logits);
      if (tok.isEndOfGeneration(s.token)) {
        finish = "stop";
        break;
      }
      const piece = dec.push(s.token);
      text += piece;
      n++;
      yield { id: s.token, text: piece, logprob: s.logprob, top: s.top ?? [] };
      if (n >= o.maxTokens) break;
      logits = await this.gm.step([{ token: s.token, slot: 0, pos, logits: true }]);
      steps++;
      pos++;
    }
    text += dec.flush();
    return { tokens: n, text, finishReason: finish, prefillMs, decodeMs: performance.now() - t0, decodeSteps: steps };
  }
}
