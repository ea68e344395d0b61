/**
 * Tokenization parity: the endpoint's tokens for a few texts against latent's, BOS included. Through /tokenize when
 * the server has one (vLLM {model, prompt}; llama-server / latent {content, add_special}); an empty token list for
 * a non-empty text is no answer. Without /tokenize, through the text path: the text goes as a prompt and the tokens
 * the server used are read back (echo tokens, SGLang input_token_logprobs), else only their count (usage).
 */
import type { Tokenizer } from "../../tokenizer/index.js";
import type { Findings } from "../report.js";
import { probe, type Dialect, type DialectContext } from "./dialects.js";
import { isRecord, tryCall } from "./http.js";

export const TOKENIZATION_TEXTS = [
  "The quick brown fox jumps over the lazy dog. One, two, three.",
  "Hello, world! 123 + 456 = 579",
  "  leading spaces\nand a newline",
];

export interface TokenizationReport {
  readonly checked: number;
  readonly mismatches: number;
  /** how the endpoint's tokens were read: /tokenize, the text path (tokens echoed back), or only their count */
  readonly via?: "tokenize" | "text" | "count";
}

async function viaTokenize(ctx: DialectContext, text: string): Promise<number[] | undefined> {
  for (const body of [
    { model: ctx.servedModel, prompt: text },
    { content: text, add_special: true },
  ]) {
    const r = await tryCall(ctx.call, `${ctx.origin}/tokenize`, body);
    const t = r.status === 200 && isRecord(r.json) && Array.isArray(r.json.tokens) ? r.json.tokens : undefined;
    if (t === undefined || (t.length === 0 && text.length > 0)) continue;
    const ids = t.map((x) => (typeof x === "number" ? x : isRecord(x) && typeof x.id === "number" ? x.id : -1));
    if (ids.every((x) => x >= 0)) return ids;
  }
  return undefined;
}

function bosHint(got: readonly number[], want: readonly number[], bos: number | undefined): string {
  if (bos === undefined) return "";
  if (got[0] === bos && got[1] === bos) return " (BOS twice)";
  if (got[0] === bos && want[0] !== bos) return " (the endpoint adds BOS, latent's tokenizer config does not)";
  if (want[0] === bos && got[0] !== bos)
    return " (the endpoint omits the BOS that tokenizer.ggml.add_bos_token asks for)";
  return "";
}

/** The tokens (or only their count) a completion used for a text prompt. */
async function viaText(
  ctx: DialectContext,
  dialect: Dialect,
  text: string,
): Promise<{ got: readonly number[] | undefined; how: "text" | "count"; count: number | undefined } | undefined> {
  // prompt_logprobs cannot say which entry is the prompt token: vLLM's text path is read through echo, else only the
  // prompt's length is known
  for (const d of dialect === "vllm" ? (["echo", "vllm"] as const) : [dialect]) {
    const r = await probe(d, { ...ctx, maxTokens: 1, topK: 1 }, { text });
    if (typeof r === "string") continue;
    if (r.promptTokens !== undefined) return { got: r.promptTokens, how: "text", count: r.promptCount };
    if (r.promptCount !== undefined) return { got: undefined, how: "count", count: r.promptCount };
  }
  return undefined;
}

export async function checkTokenization(
  ctx: DialectContext,
  dialect: Dialect | undefined,
  tok: Tokenizer,
  f: Findings,
): Promise<TokenizationReport> {
  let checked = 0;
  let mismatches = 0;
  let via: TokenizationReport["via"];
  for (const text of TOKENIZATION_TEXTS) {
    const want = tok.encode(text);
    let got: readonly number[] | undefined =
      via === undefined || via === "tokenize" ? await viaTokenize(ctx, text) : undefined;
    let how: TokenizationReport["via"] = got !== undefined ? "tokenize" : undefined;
    let count: number | undefined;
    if (got === undefined && dialect !== undefined) {
      const t = await viaText(ctx, dialect, text);
      if (t !== undefined) ({ got, how, count } = t);
    }
    if (
      how === "tokenize" &&
      got !== undefined &&
      dialect !== undefined &&
      want[0] === tok.bosId &&
      got.length === want.length - 1 &&
      got.every((x, k) => x === want[k + 1])
    ) {
      // /tokenize without the BOS only: its options (add_special) may differ from what completions do — the text
      // path decides
      const t = await viaText(ctx, dialect, text);
      const textOk =
        t !== undefined &&
        (t.got !== undefined
          ? t.got.length === want.length && t.got.every((x, k) => x === want[k])
          : t.count === want.length);
      if (textOk) {
        f.add(
          "endpoint",
          "info",
          "tokenize-route-no-bos",
          `/tokenize leaves out the BOS for ${JSON.stringify(text.slice(0, 30))}, but text prompts in completions get it (checked through the text path)`,
        );
        checked++;
        via = "tokenize";
        continue;
      }
    }
    if (how === undefined) break;
    via = how;
    checked++;
    if (got === undefined) {
      if (count === want.length) continue;
      mismatches++;
      const hint =
        count === want.length - 1 && want[0] === tok.bosId
          ? " (one fewer: the endpoint's text path omits the BOS that tokenizer.ggml.add_bos_token asks for?)"
          : count === want.length + 1
            ? " (one more: BOS added twice?)"
            : "";
      f.add(
        "endpoint",
        "error",
        "tokenization",
        `the endpoint's text path uses ${count} tokens for ${JSON.stringify(text.slice(0, 30))}, latent's tokenizer ${want.length}${hint}`,
        { text, endpointCount: count, latent: want, via: how },
      );
      continue;
    }
    const same = got.length === want.length && got.every((x, i) => x === want[i]);
    if (same) continue;
    mismatches++;
    const i = got.findIndex((x, j) => x !== want[j]);
    const where = how === "tokenize" ? "tokenizes" : "tokenizes (text path, tokens read back from the completion)";
    f.add(
      "endpoint",
      "error",
      "tokenization",
      `the endpoint ${where} ${JSON.stringify(text.slice(0, 30))} differently${bosHint(got, want, tok.bosId)}: first difference at index ${i === -1 ? Math.min(got.length, want.length) : i} (endpoint ${JSON.stringify(got.slice(0, 12))}, latent ${JSON.stringify(want.slice(0, 12))})`,
      { text, endpoint: got, latent: want, via: how },
    );
  }
  if (checked === 0)
    f.add(
      "endpoint",
      "info",
      "tokenize-unavailable",
      "the endpoint has no /tokenize and echoes no prompt tokens: tokenization parity not checked (prompts are sent as token ids)",
    );
  else if (via !== "tokenize")
    f.add(
      "endpoint",
      "info",
      "tokenize-text-path",
      `no /tokenize: tokenization checked through the text path (${via === "text" ? "the tokens the server echoed back" : "the prompt token counts it reported"})`,
    );
  return { checked, mismatches, ...(via !== undefined ? { via } : {}) };
}
