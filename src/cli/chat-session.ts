import { LatentCache } from "../model/cache.js";
import { generate, type GenerateModel, type GenerateResult } from "../engine/generate.js";
import type { ChatMessage, Tokenizer } from "../tokenizer/index.js";
import type { Sampler } from "../engine/sampler.js";
import { UsageError } from "../util/errors.js";

/** What one turn did: how much of the conversation came from the cache, how much was prefilled, and the reply. */
export interface TurnReport {
  /** tokens of the rendered conversation (history + this message + the assistant header) */
  readonly conversationTokens: number;
  /** of those, the leading ones whose latents were already in the cache */
  readonly reusedTokens: number;
  /** the rest, prefilled this turn */
  readonly prefilledTokens: number;
  readonly result: GenerateResult;
}

export interface ChatSessionOptions {
  readonly system?: string;
  readonly sampler: Sampler;
  /** most tokens per reply (Infinity: until end-of-generation or the context is full) */
  readonly maxTokens: number;
}

/**
 * A multi-turn conversation over one model whose latent cache lives as long as the conversation. Each turn renders the
 * whole conversation through the chat template (so the template decides the format), then prefills only what the
 * cache does not already hold: the longest common prefix of the cached tokens and the new rendering is kept, the rest
 * truncated and recomputed. Usually that prefix is every earlier turn; when re-encoding the reply's text gives other
 * tokens than were generated, or a template rewrites earlier turns, the cache falls back to where they agree.
 */
export class ChatSession {
  private readonly cache: LatentCache;
  /** the token at each position the cache holds (cache.length of them) */
  private cached: number[] = [];
  private messages: ChatMessage[] = [];
  /** the reports of the turns since the start or the last reset */
  readonly turns: TurnReport[] = [];

  constructor(
    private readonly model: GenerateModel,
    private readonly tokenizer: Tokenizer,
    private readonly opts: ChatSessionOptions,
  ) {
    this.cache = new LatentCache(model.config);
    this.reset();
  }

  /** Forget the conversation (the system message stays) and empty the cache. */
  reset(): void {
    this.messages = this.opts.system !== undefined ? [{ role: "system", content: this.opts.system }] : [];
    this.cache.truncate(0);
    this.cached = [];
    this.turns.length = 0;
  }

  /** Positions the cache holds now. */
  get cachedTokens(): number {
    return this.cache.length;
  }

  /** One user message in, the assistant's reply out (streamed through `onText`). */
  async send(userText: string, onText: (text: string) => void): Promise<TurnReport> {
    const messages: ChatMessage[] = [...this.messages, { role: "user", content: userText }];
    const ids = this.tokenizer.encodeChat(messages);
    const context = this.model.config.contextLength;
    if (ids.length >= context)
      throw new UsageError(
        `the conversation is ${ids.length} tokens, the model's context is ${context}: /reset to start again`,
      );
    // at least the last token is fed again: its logits choose the reply's first token
    const reused = Math.min(commonPrefix(this.cached, ids), ids.length - 1);
    this.cache.truncate(reused);
    this.cached.length = reused;
    const fresh = ids.slice(reused);
    const cache = this.cache;
    const inner = this.model;
    // generate() opens a cache of its own for the prompt it is given; routing its forward passes into the session's
    // cache makes that prompt a continuation of the conversation held there
    const continued: GenerateModel = {
      config: inner.config,
      forward: (tokens, _own, o) => inner.forward(tokens, cache, o),
    };
    let streamed = 0;
    const result = await generate(continued, this.tokenizer, fresh, {
      sampler: this.opts.sampler,
      maxTokens: Math.min(this.opts.maxTokens, context - ids.length),
      onToken: (ev) => {
        onText(ev.text);
        streamed += ev.text.length;
      },
    });
    onText(result.text.slice(streamed));
    // the last chosen token is not in the cache unless a forward pass fed it: cache.length says how far it got
    this.cached = [...ids, ...result.tokens].slice(0, cache.length);
    this.messages = [...messages, { role: "assistant", content: result.text }];
    const report: TurnReport = {
      conversationTokens: ids.length,
      reusedTokens: reused,
      prefilledTokens: fresh.length,
      result,
    };
    this.turns.push(report);
    return report;
  }
}

function commonPrefix(a: readonly number[], b: readonly number[]): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}
