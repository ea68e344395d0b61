// The page's WebGPU backend: the library's WebGPU session (src/index.ts: the library's device on navigator.gpu, the
// fused forward pass, generation through the engine's loop), in the shapes the worker posts to the page.
import type { LatentModel, WebGpuSession } from "../src/index.js";

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
  /** decode steps whose token was used (the tokens per second are these over decodeMs) */
  readonly decodeSteps: number;
}

/** Positions a page's session holds: a browser's GPU memory is shared with the page, and demo prompts are short. */
const PAGE_CONTEXT = 256;

export class GpuSession {
  private constructor(private readonly session: WebGpuSession) {}

  get adapter(): string {
    return this.session.adapter;
  }
  get context(): number {
    return this.session.context;
  }

  static async create(m: LatentModel, context = PAGE_CONTEXT): Promise<GpuSession> {
    return new GpuSession(await m.webgpu({ context }));
  }

  /** Next-token logits after every position of `tokens` (prefill chunks on the GPU). */
  logitsAll(tokens: readonly number[]): Promise<Float32Array[]> {
    return this.session.logitsAll(tokens);
  }

  async *generate(prompt: readonly number[], o: GpuGenerateOptions): AsyncGenerator<GpuToken, GpuResult, void> {
    const it = this.session.stream(prompt, {
      maxTokens: o.maxTokens,
      temperature: o.temperature,
      topK: o.topK,
      topP: o.topP,
      seed: o.seed,
      logprobs: o.logprobs,
      signal: o.signal,
    });
    for (;;) {
      const r = await it.next();
      if (r.done === true) {
        const res = r.value;
        return {
          tokens: res.tokens.length,
          text: res.text,
          finishReason: res.finishReason,
          prefillMs: res.timings.prefillMs,
          decodeMs: res.timings.decodeMs,
          decodeSteps: res.timings.usedSteps,
        };
      }
      const ev = r.value;
      yield { id: ev.id, text: ev.text, logprob: ev.logprob, top: ev.top ?? [] };
    }
  }
}
