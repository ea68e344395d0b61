// Messages between the page (main.ts) and the engine's Web Worker (worker.ts).
import type { InspectSummary, PathCheck } from "../src/index.js";

/** the CPU attention paths, or the WebGPU forward pass */
export type LogitsPath = "prefill" | "decode" | "reference" | "webgpu";

export type ModelSource =
  | { readonly kind: "files"; readonly files: readonly File[] }
  | { readonly kind: "url"; readonly url: string };

/** One turn of the page's conversation, as the model's chat template reads it. */
// a type alias, not an interface: the engine's ChatMessage has an index signature, which only aliases satisfy
export type ChatTurn = {
  readonly role: "system" | "user" | "assistant";
  readonly content: string;
};

export interface GenerateRequest {
  /** the text to continue ("text"), or the user's newest message ("chat") */
  readonly prompt: string;
  /** "chat": `messages` through the model's chat template; "text": `prompt` continued as raw text */
  readonly mode: "chat" | "text";
  /**
   * "chat" only: the whole conversation — system prompt, earlier turns, and the newest user message last. Without
   * it the prompt is sent as a single user message.
   */
  readonly messages?: readonly ChatTurn[];
  readonly maxTokens: number;
  readonly temperature: number;
  readonly topK: number;
  readonly topP: number;
  readonly seed: number;
  /** top alternatives per token */
  readonly logprobs: number;
}

export type ToWorker =
  | { readonly type: "load"; readonly source: ModelSource; readonly backend: "cpu" | "webgpu" }
  | { readonly type: "generate"; readonly id: number; readonly req: GenerateRequest }
  | { readonly type: "stop" }
  | {
      readonly type: "logits";
      readonly id: number;
      readonly tokens?: readonly number[];
      readonly text?: string;
      readonly path?: LogitsPath;
    }
  | { readonly type: "tokenize"; readonly id: number; readonly text: string }
  | { readonly type: "pathcheck"; readonly id: number; readonly text: string };

export interface TokenInfo {
  readonly id: number;
  readonly text: string;
  /** the token's own text (for the probability view; `text` can be held back by the streaming decoder) */
  readonly piece: string;
  readonly logprob: number;
  readonly top: readonly { readonly id: number; readonly piece: string; readonly logprob: number }[];
}

export interface ModelInfo {
  readonly name: string;
  readonly summary: InspectSummary;
  readonly summaryText: string;
  readonly hasChat: boolean;
  readonly loadMs: number;
  readonly backend: string;
  /** why WebGPU was asked for but is not used */
  readonly gpuError?: string;
  readonly bytesFetched: number;
}

export interface DoneInfo {
  readonly text: string;
  readonly tokens: number;
  readonly promptTokens: number;
  readonly finishReason: string;
  readonly prefillMs: number;
  readonly decodeMs: number;
  readonly tokensPerSecond: number;
  readonly promptTokensPerSecond: number;
}

export type FromWorker =
  | { readonly type: "progress"; readonly phase: "fetch" | "weights"; readonly done: number; readonly total: number }
  | { readonly type: "loaded"; readonly info: ModelInfo }
  | { readonly type: "prompt"; readonly id: number; readonly tokens: number }
  | { readonly type: "token"; readonly id: number; readonly token: TokenInfo }
  | { readonly type: "done"; readonly id: number; readonly done: DoneInfo }
  | { readonly type: "logits"; readonly id: number; readonly tokens: readonly number[]; readonly logits: Float32Array }
  | { readonly type: "tokens"; readonly id: number; readonly tokens: readonly number[] }
  | { readonly type: "pathcheck"; readonly id: number; readonly check: PathCheck; readonly gpu?: GpuCheckRow }
  | { readonly type: "error"; readonly id?: number; readonly message: string };

/** The WebGPU forward pass against the CPU reference, in the path check. */
export interface GpuCheckRow {
  readonly ms: number;
  readonly maxAbsDiff: number;
  readonly top1Agree: number;
  readonly ok: boolean;
}
