// Chained greedy decoding (GenerateOptions.chainedGreedy) against host sampling: a generation run both ways must give
// the same tokens, text, finish reason, stop cause and streamed events, and the same logprobs (within 1e-4: the GPU
// computes the chained tokens' in float32). Shared by the engine tests (a CPU model with
// a host-side decodeGreedy) and the fused WebGPU tests (FusedGpuModel).
import assert from "node:assert/strict";
import {
  generateSync,
  type GenerateModel,
  type GenerateOptions,
  type GenerateResult,
  type GenerateTokenizer,
  type TokenEvent,
} from "../../src/engine/generate.js";
import type { GreedyChainModel, GreedyChunk, PickDraw } from "../../src/engine/device-picks.js";
import type { LatentStore } from "../../src/model/cache.js";
import { logSoftmax } from "../../src/engine/logprobs.js";
import { argmax, Sampler } from "../../src/engine/sampler.js";

/** Largest tolerated |Δ logprob| between a chained token and the same token sampled on the host. */
export const CHAINED_LOGPROB_TOL = 1e-4;

/** Assert that `got` and `want` are the same length and every entry is finite and within `tol` of its pair. */
export function assertLogprobsClose(
  got: readonly number[],
  want: readonly number[],
  what: string,
  tol = CHAINED_LOGPROB_TOL,
): void {
  assert.equal(got.length, want.length, `${what}: logprob count`);
  got.forEach((g, i) => {
    assert.ok(
      Number.isFinite(g) && Number.isFinite(want[i]),
      `${what}: token ${i} logprob ${g} vs ${want[i]} (finite)`,
    );
    assert.ok(Math.abs(g - want[i]) <= tol, `${what}: token ${i} logprob ${g} vs the host's ${want[i]}`);
  });
}

export interface ChainedVsHost {
  readonly host: GenerateResult;
  readonly chained: GenerateResult;
}

/** Generate with chained greedy decoding off, then on; assert that everything agrees (logprobs within 1e-4). */
export function assertChainedEqualsHost(
  model: GenerateModel,
  tok: GenerateTokenizer,
  prompt: readonly number[],
  opts: GenerateOptions,
  what: string,
): ChainedVsHost {
  const run = (chainedGreedy: boolean): { result: GenerateResult; events: TokenEvent[] } => {
    const events: TokenEvent[] = [];
    const result = generateSync(model, tok, prompt, { ...opts, chainedGreedy, onToken: (e) => events.push(e) });
    return { result, events };
  };
  const host = run(false);
  const chained = run(true);
  assert.equal(host.result.decode, "host-sampling", `${what}: chainedGreedy false samples on the host`);
  assert.equal(chained.result.decode, "greedy-chained", `${what}: greedy on a GreedyChainModel chains`);
  assert.deepEqual(chained.result.tokens, host.result.tokens, `${what}: tokens`);
  assert.equal(chained.result.text, host.result.text, `${what}: text`);
  assert.equal(chained.result.finishReason, host.result.finishReason, `${what}: finish reason`);
  assert.deepEqual(chained.result.stoppedBy, host.result.stoppedBy, `${what}: stopped by`);
  const view = (es: TokenEvent[]): [number, string, number][] => es.map((e) => [e.id, e.text, e.index]);
  assert.deepEqual(view(chained.events), view(host.events), `${what}: streamed events`);
  // the first token comes from the prompt's logits through the sampler (the same number); the rest from the chain
  if (host.result.tokens.length > 0)
    assert.equal(chained.result.logprobs[0], host.result.logprobs[0], `${what}: first token's logprob`);
  assertLogprobsClose(chained.result.logprobs, host.result.logprobs, what);
  assertLogprobsClose(
    chained.events.map((e) => e.logprob),
    chained.result.logprobs,
    `${what}: streamed logprobs`,
    0,
  );
  return { host: host.result, chained: chained.result };
}

/**
 * A model's forward pass plus a GreedyChainModel that takes the steps one forward at a time with the host's argmax
 * and log-softmax, recording the steps of every chunk it was asked for.
 */
export class HostChainModel implements GreedyChainModel {
  readonly config: GenerateModel["config"];
  /** the steps of each decodeGreedy call, in order */
  readonly chunks: number[] = [];
  constructor(
    private readonly inner: GenerateModel,
    config?: GenerateModel["config"],
  ) {
    this.config = config ?? inner.config;
  }
  forward(
    tokens: readonly number[],
    cache: LatentStore | undefined,
    opts: Parameters<GenerateModel["forward"]>[2],
  ): Float32Array {
    return this.inner.forward(tokens, cache, opts);
  }
  decodeGreedy(token: number, cache: LatentStore, steps: number): GreedyChunk {
    this.chunks.push(steps);
    const tokens: number[] = [];
    const logprobs: number[] = [];
    let next = token;
    for (let s = 0; s < steps; s++) {
      const logits = this.inner.forward([next], cache, { path: "decode", logits: "last" });
      next = argmax(logits);
      tokens.push(next);
      logprobs.push(logSoftmax(logits)[next]);
    }
    return { tokens, logprobs };
  }
}

/**
 * HostChainModel that also chains draws (chainsDraws, picksDrawFiltered): a drawn step's token stands in for the device's
 * draw as the host Sampler's kept ids (its filters at the draw's settings) indexed by the draw's key; the draws are
 * recorded.
 */
export class HostDrawModel extends HostChainModel {
  readonly chainsDraws = true;
  readonly picksDrawFiltered = true;
  readonly draws: PickDraw[] = [];
  constructor(private readonly base: GenerateModel) {
    super(base);
  }
  override decodeGreedy(token: number, cache: LatentStore, steps: number, draws?: readonly PickDraw[]): GreedyChunk {
    if (draws === undefined) return super.decodeGreedy(token, cache, steps);
    this.chunks.push(steps);
    assert.equal(draws.length, steps);
    const tokens: number[] = [];
    const logprobs: number[] = [];
    let next = token;
    for (const d of draws) {
      this.draws.push(d);
      const logits = this.base.forward([next], cache, { path: "decode", logits: "last" });
      const lp = logSoftmax(logits);
      const kept = new Sampler({
        temperature: d.temperature,
        topK: d.topK ?? 0,
        topP: d.topP ?? 1,
        minP: d.minP ?? 0,
        seed: 1,
      }).candidates(Float64Array.from(lp));
      next = kept[d.key % kept.length];
      tokens.push(next);
      logprobs.push(lp[next]);
    }
    return { tokens, logprobs };
  }
}
