/**
 * Hugging Face tokenizer.json (byte-level BPE) + tokenizer_config.json → `tokenizer.ggml.*` keys, as llama.cpp's
 * convert_hf_to_gguf writes them for gpt2-style vocabularies (get_vocab_base + SpecialVocab):
 * - tokens by id; ids the tokenizer lacks (config vocab_size larger) become `[PAD{id}]`, type UNUSED;
 * - added tokens: CONTROL when `special`, else USER_DEFINED; everything else NORMAL;
 * - merges as "left right" strings in rank order;
 * - bos/eos/pad/unk ids from tokenizer_config.json's token strings; add_bos_token from tokenizer_config.json or,
 *   when absent, from a TemplateProcessing post-processor that prepends BOS;
 * - `pre` from the pre-tokenizer's split regexes (llama.cpp hashes the tokenizer's output instead; the regex
 *   lists are what decides the split, so comparing them needs no table of hashes).
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { GGUFValueType, type GGUFMetadataEntry } from "../gguf/types.js";
import { PRE_TOKENIZER_REGEXES } from "../tokenizer/index.js";
import { ConvertError } from "./safetensors.js";

export const TOKEN_TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

export type ConvertPre = "deepseek-llm" | "deepseek-v3" | "glm4";

export interface HfVocab {
  readonly tokens: string[];
  readonly types: number[];
  readonly merges: string[];
  readonly pre: ConvertPre;
  readonly bos?: number;
  readonly eos?: number;
  readonly eot?: number;
  readonly eom?: number;
  readonly unk?: number;
  readonly pad?: number;
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly chatTemplate?: string;
}

interface AddedToken {
  id: number;
  content: string;
  special?: boolean;
}

type Json = Record<string, unknown>;

function readJson(path: string): Json {
  let v: unknown;
  try {
    v = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new ConvertError(`${path}: ${(e as Error).message}`);
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) throw new ConvertError(`${path}: not a JSON object`);
  return v as Json;
}

/** Split regexes of a tokenizer.json pre_tokenizer (Sequence of Split, or one Split), in order. */
function splitRegexes(pt: unknown): string[] {
  if (pt === null || typeof pt !== "object") return [];
  const o = pt as Json;
  if (o.type === "Sequence" && Array.isArray(o.pretokenizers)) return o.pretokenizers.flatMap((p) => splitRegexes(p));
  if (o.type === "Split") {
    const pat = o.pattern as Json | undefined;
    if (pat !== undefined && typeof pat.Regex === "string") return [pat.Regex];
  }
  return [];
}

const norm = (s: string): string => s.replace(/\\(["'\-/])/g, "$1");

/** llama.cpp pre-tokenizer name for a tokenizer.json, by its split regexes, else by the model family. */
export function detectPre(preTokenizer: unknown, modelType: string): ConvertPre {
  const res = splitRegexes(preTokenizer).map(norm);
  for (const name of ["deepseek-v3", "deepseek-llm", "glm4"] as const) {
    const want = PRE_TOKENIZER_REGEXES[name].map(norm);
    if (res.length === want.length && res.every((r, i) => r === want[i])) return name;
  }
  const all = res.join("\n");
  if (all.includes("\\p{N}{1,3}") && all.includes("぀-ゟ")) return "deepseek-v3";
  if (all.includes("µÀ-ÖØ-öø")) return "deepseek-llm";
  if (/\(\?i:'s\|'t\|'re\|'ve\|'m\|'ll\|'d\)/.test(all) || all.includes("'[sS]")) return "glm4";
  if (res.length > 0)
    throw new ConvertError(
      `tokenizer.json: unrecognised pre-tokenizer regexes ${JSON.stringify(res)} (latent knows deepseek-llm, deepseek-v3 and glm4)`,
    );
  if (modelType === "deepseek_v2") return "deepseek-llm";
  if (modelType === "deepseek_v3") return "deepseek-v3";
  if (modelType.startsWith("glm")) return "glm4";
  throw new ConvertError(`tokenizer.json: no pre-tokenizer regexes and no default for model_type "${modelType}"`);
}

function tokenString(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (v !== null && typeof v === "object" && typeof (v as Json).content === "string")
    return (v as Json).content as string;
  return undefined;
}

/** Read tokenizer.json (+ tokenizer_config.json) of an HF checkpoint directory. */
export function readHfVocab(dir: string, modelType: string, vocabSize: number): HfVocab {
  const path = join(dir, "tokenizer.json");
  if (!existsSync(path)) {
    const slow = ["tokenizer.model", "tiktoken.model", "vocab.json"].find((f) => existsSync(join(dir, f)));
    throw new ConvertError(
      `${dir}: no tokenizer.json${slow !== undefined ? ` (found ${slow}: only fast byte-level BPE tokenizer.json files are supported)` : ""}`,
    );
  }
  const tj = readJson(path);
  const model = tj.model as Json | undefined;
  if (model === undefined || model.type !== "BPE")
    throw new ConvertError(`${path}: model.type must be "BPE" (byte-level), got ${JSON.stringify(model?.type)}`);
  const vocab = model.vocab as Record<string, number> | undefined;
  if (vocab === undefined || typeof vocab !== "object") throw new ConvertError(`${path}: model.vocab missing`);
  const added = ((tj.added_tokens as AddedToken[] | undefined) ?? []).filter(
    (t) => Number.isInteger(t.id) && typeof t.content === "string",
  );
  const byId = new Map<number, string>();
  for (const [tok, id] of Object.entries(vocab)) byId.set(id, tok);
  for (const t of added) byId.set(t.id, t.content);
  const maxId = Math.max(-1, ...byId.keys());
  if (maxId >= vocabSize) throw new ConvertError(`${path}: token id ${maxId} ≥ config vocab_size ${vocabSize}`);
  const addedById = new Map(added.map((t) => [t.id, t]));
  const tokens: string[] = [];
  const types: number[] = [];
  for (let i = 0; i < vocabSize; i++) {
    const tok = byId.get(i);
    if (tok === undefined) {
      tokens.push(`[PAD${i}]`);
      types.push(TOKEN_TYPE.UNUSED);
      continue;
    }
    tokens.push(tok);
    const a = addedById.get(i);
    types.push(a === undefined ? TOKEN_TYPE.NORMAL : a.special === true ? TOKEN_TYPE.CONTROL : TOKEN_TYPE.USER_DEFINED);
  }
  const rawMerges = (model.merges as unknown[] | undefined) ?? [];
  const merges = rawMerges.map((m, i) => {
    if (typeof m === "string") return m;
    if (Array.isArray(m) && m.length === 2 && typeof m[0] === "string" && typeof m[1] === "string")
      return `${m[0]} ${m[1]}`;
    throw new ConvertError(`${path}: merge ${i} is neither "a b" nor ["a", "b"]`);
  });
  const pre = detectPre(tj.pre_tokenizer, modelType);

  const cfgPath = join(dir, "tokenizer_config.json");
  const tc = existsSync(cfgPath) ? readJson(cfgPath) : {};
  const idOf = (v: unknown): number | undefined => {
    const s = tokenString(v);
    if (s === undefined) return undefined;
    const id = tokens.indexOf(s);
    return id >= 0 ? id : undefined;
  };
  const special = (name: string): number | undefined => {
    const id = tokens.indexOf(name);
    return id >= 0 ? id : undefined;
  };
  let bos = idOf(tc.bos_token);
  let eos = idOf(tc.eos_token);
  let unk = idOf(tc.unk_token);
  const pad = idOf(tc.pad_token);
  let eot: number | undefined;
  let eom: number | undefined;
  if (pre === "glm4") {
    // llama.cpp conversion/glm.py: bos [gMASK], eot <|user|>, unk <|endoftext|>, eom <|observation|>
    bos = special("[gMASK]") ?? bos;
    eos = special("<|endoftext|>") ?? eos;
    unk = special("<|endoftext|>") ?? unk;
    eot = special("<|user|>");
    eom = special("<|observation|>");
  }
  let addBos: boolean;
  if (typeof tc.add_bos_token === "boolean") addBos = tc.add_bos_token;
  else {
    const pp = tj.post_processor as Json | null | undefined;
    const single = pp?.type === "TemplateProcessing" ? (pp.single as Json[] | undefined) : undefined;
    const first = single?.[0]?.SpecialToken as Json | undefined;
    addBos = first !== undefined && bos !== undefined && first.id === tokens[bos];
  }
  const addEos = tc.add_eos_token === true;
  let chatTemplate: string | undefined;
  if (typeof tc.chat_template === "string") chatTemplate = tc.chat_template;
  else if (Array.isArray(tc.chat_template)) {
    const d = (tc.chat_template as Json[]).find((t) => t.name === "default");
    if (typeof d?.template === "string") chatTemplate = d.template;
  }
  const jinja = join(dir, "chat_template.jinja");
  if (chatTemplate === undefined && existsSync(jinja)) chatTemplate = readFileSync(jinja, "utf8");
  return { tokens, types, merges, pre, bos, eos, eot, eom, unk, pad, addBos, addEos, chatTemplate };
}

/** The `tokenizer.*` GGUF keys of a vocabulary. */
export function vocabMetadata(v: HfVocab): Map<string, GGUFMetadataEntry> {
  const m = new Map<string, GGUFMetadataEntry>();
  const u32 = (value: number): GGUFMetadataEntry => ({ type: GGUFValueType.UINT32, value });
  m.set("tokenizer.ggml.model", { type: GGUFValueType.STRING, value: "gpt2" });
  m.set("tokenizer.ggml.pre", { type: GGUFValueType.STRING, value: v.pre });
  m.set("tokenizer.ggml.tokens", {
    type: GGUFValueType.ARRAY,
    value: { elementType: GGUFValueType.STRING, values: v.tokens },
  });
  m.set("tokenizer.ggml.token_type", {
    type: GGUFValueType.ARRAY,
    value: { elementType: GGUFValueType.INT32, values: v.types },
  });
  m.set("tokenizer.ggml.merges", {
    type: GGUFValueType.ARRAY,
    value: { elementType: GGUFValueType.STRING, values: v.merges },
  });
  if (v.bos !== undefined) m.set("tokenizer.ggml.bos_token_id", u32(v.bos));
  if (v.eos !== undefined) m.set("tokenizer.ggml.eos_token_id", u32(v.eos));
  if (v.eot !== undefined) m.set("tokenizer.ggml.eot_token_id", u32(v.eot));
  if (v.eom !== undefined) m.set("tokenizer.ggml.eom_token_id", u32(v.eom));
  if (v.unk !== undefined) m.set("tokenizer.ggml.unknown_token_id", u32(v.unk));
  if (v.pad !== undefined) m.set("tokenizer.ggml.padding_token_id", u32(v.pad));
  m.set("tokenizer.ggml.add_bos_token", { type: GGUFValueType.BOOL, value: v.addBos });
  m.set("tokenizer.ggml.add_eos_token", { type: GGUFValueType.BOOL, value: v.addEos });
  if (v.chatTemplate !== undefined)
    m.set("tokenizer.chat_template", { type: GGUFValueType.STRING, value: v.chatTemplate });
  return m;
}
