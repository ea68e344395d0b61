/** `latent doctor` as a library: diagnose a GGUF file (file, paths, behaviour, low-memory) or a live endpoint. */
import { existsSync } from "node:fs";
import { GGUFFile } from "../gguf/file.js";
import { parseConfig } from "../model/config.js";
import { DeepSeek2 } from "../model/deepseek2.js";
import { GlmDsa } from "../model/glm-dsa.js";
import { loadWeights } from "../model/weights.js";
import { CpuBackend } from "../backend/cpu/fast.js";
import { Tokenizer } from "../tokenizer/index.js";
import { LatentError, UsageError } from "../util/errors.js";
import { checkBehaviour, type BehaviourReport } from "./behaviour.js";
import { CALIBRATION_TEXT } from "./perplexity.js";
import { checkFile, DATA_ERRORS, type FileReport, type TensorStats } from "./file-checks.js";
import { checkPaths, defaultPrompts, type PathReport, type Prompt } from "./paths.js";
import {
  DOCTOR_FORMAT,
  exitCodeOf,
  Findings,
  noProgress,
  verdictOf,
  type Finding,
  type Progress,
  type Verdict,
} from "./report.js";
import { streamedLogits, type LayerProgress, type LowMemoryReport } from "./low-memory.js";
import { checkEndpoint, type EndpointReport, type StreamedReference } from "./endpoint.js";
import { checkSource, openSourceModel, SourceUnreadableError, type SourceReport } from "./source.js";
import type { SourceModel } from "./source-model.js";

export interface DoctorOptions {
  readonly model: string;
  /** check a live OpenAI-compatible endpoint against latent's reference on `model` */
  readonly endpoint?: string;
  readonly apiKey?: string;
  /**
   * reference logits streamed one layer at a time from disk instead of loading the model (with `endpoint`: the
   * endpoint is compared with them)
   */
  readonly lowMemory?: boolean;
  /**
   * kernels of the prefill/decode paths under test: "reference" (plain, default) or "cpu" (the fast backend); with
   * `lowMemory`, the kernels of the streamed pass
   */
  readonly backend?: "reference" | "cpu";
  /** threads of the "cpu" kernels (default: available parallelism) */
  readonly threads?: number;
  /** prefill chunk of the path checks (default 8) */
  readonly chunk?: number;
  /** skip the NaN/Inf + statistics scan */
  readonly skipData?: boolean;
  readonly progress?: Progress;
  /** one line per stage and per path-check run (they are silent for minutes on a large model) */
  readonly onStep?: (message: string) => void;
  /**
   * The implementation under test, built from the clean model (default: the clean model itself). Tests pass
   * `(m) => withFaults(m, …)`; a fast backend would swap kernels here.
   */
  readonly implementation?: (clean: DeepSeek2) => DeepSeek2;
  /** probe texts for the behaviour checks */
  readonly probes?: readonly string[];
  readonly greedyTokens?: number;
  readonly fetch?: typeof fetch;
  /** compare every tensor and the logits with the original checkpoint (HF directory) or another GGUF of the model */
  readonly source?: string;
}

export interface DoctorReport {
  readonly format: typeof DOCTOR_FORMAT;
  readonly target: { readonly model: string; readonly endpoint?: string };
  readonly verdict: Verdict;
  readonly exitCode: 0 | 1 | 2;
  readonly findings: readonly Finding[];
  readonly file?: Omit<FileReport, "config" | "stats"> & { readonly stats: readonly TensorStats[] };
  readonly paths?: PathReport;
  readonly behaviour?: BehaviourReport;
  readonly endpoint?: EndpointReport;
  readonly lowMemory?: LowMemoryReport;
  readonly source?: SourceReport;
  readonly timingsMs: Readonly<Record<string, number>>;
}

export const DEFAULT_PROBES = [
  "1, 2, 3, 4, 5, 6, 7, 8, 9,",
  "the cat sat on the mat. the cat sat on the mat. the cat sat on the",
];

function finish(
  opts: DoctorOptions,
  findings: Findings,
  parts: Partial<DoctorReport>,
  timings: Record<string, number>,
  couldNotRun = false,
): DoctorReport {
  const verdict: Verdict = couldNotRun ? "could-not-run" : verdictOf(findings.list);
  return {
    format: DOCTOR_FORMAT,
    target: { model: opts.model, ...(opts.endpoint !== undefined ? { endpoint: opts.endpoint } : {}) },
    verdict,
    exitCode: exitCodeOf(verdict),
    findings: findings.list,
    ...parts,
    timingsMs: timings,
  };
}

export async function runDoctor(opts: DoctorOptions): Promise<DoctorReport> {
  const findings = new Findings();
  const timings: Record<string, number> = {};
  const time = <T>(name: string, f: () => T): T => {
    opts.onStep?.(`${name}…`);
    const t0 = performance.now();
    try {
      return f();
    } finally {
      timings[name] = Math.round(performance.now() - t0);
    }
  };
  if (!existsSync(opts.model)) throw new UsageError(`model file not found: ${opts.model}`);
  let file: GGUFFile;
  try {
    file = GGUFFile.open(opts.model);
  } catch (e) {
    if (!(e instanceof LatentError)) throw e;
    findings.add("file", "error", "unreadable", `not a readable GGUF: ${e.message}`);
    return finish(opts, findings, {}, timings);
  }
  let backend: CpuBackend | undefined;
  let source: SourceModel | undefined;
  try {
    if (opts.source !== undefined) {
      try {
        source = openSourceModel(opts.source);
      } catch (e) {
        if (!(e instanceof SourceUnreadableError)) throw e;
        findings.add("source", "error", "source-unreadable", e.message, { source: opts.source });
        return finish(opts, findings, {}, timings, true);
      }
    }
    const fr = time("file", () =>
      checkFile(file, findings, { skipData: opts.skipData === true, progress: opts.progress ?? noProgress }),
    );
    const { config, ...fileReport } = fr;
    const parts: { -readonly [K in keyof DoctorReport]?: DoctorReport[K] } = { file: fileReport };
    const blocking = findings.list.some(
      (f) =>
        f.severity === "error" &&
        (f.area === "tensors" || f.area === "names" || f.code === "config") &&
        !DATA_ERRORS.has(f.code),
    );
    if (source !== undefined) {
      if (config === undefined)
        findings.add(
          "source",
          "info",
          "source-skipped",
          "source comparison skipped: the file's metadata gives no model config",
        );
      else {
        const tokenizer = tryTokenizer(file);
        const src = source;
        parts.source = time("source", () =>
          checkSource(file, config, src, findings, {
            prompts: sourcePrompts(config.nVocab, tokenizer),
            loadable: !blocking,
          }),
        );
      }
      // with a source the report is about the conversion; the compute-path checks (run without --source) are skipped to keep it fast
      return finish(opts, findings, parts, timings);
    }
    if (config === undefined || blocking) {
      findings.add("paths", "info", "skipped", "compute checks skipped: the file cannot be loaded as it is");
      return finish(opts, findings, parts, timings);
    }
    let tokenizer: Tokenizer | undefined;
    try {
      if (file.metadata.has("tokenizer.ggml.tokens")) tokenizer = Tokenizer.fromMetadata(file.metadata);
    } catch {
      tokenizer = undefined;
    }
    const encode = tokenizer ? (t: string): number[] => tokenizer.encode(t) : undefined;

    if (opts.lowMemory === true) {
      const streamOpts = {
        kernels: opts.backend ?? "reference",
        ...(opts.threads !== undefined ? { threads: opts.threads } : {}),
        ...(opts.onStep !== undefined ? { onLayer: layerStep(opts.onStep) } : {}),
      } as const;
      if (opts.endpoint === undefined) {
        const prompt = defaultPrompts(config.nVocab, opts.chunk ?? 8, encode)[1];
        parts.lowMemory = time("lowMemory", () => streamedLogits(file, config, [prompt.tokens], streamOpts).report);
        return finish(opts, findings, parts, timings);
      }
      // The endpoint against the streamed pass: every probe sequence through each layer while it is in memory. The
      // file's behaviour checks and the known-fault matcher need the model in memory: not run.
      const streamed: StreamedReference = {
        config,
        logitsOf: (seqs) =>
          time("lowMemory", () => {
            const r = streamedLogits(file, config, seqs, streamOpts);
            parts.lowMemory = r.report;
            const V = config.nVocab;
            return r.logits.map((l) => Array.from({ length: l.length / V }, (_, i) => l.subarray(i * V, (i + 1) * V)));
          }),
      };
      parts.endpoint = await checkEndpoint({
        base: opts.endpoint,
        apiKey: opts.apiKey,
        model: streamed,
        tokenizer,
        findings,
        fetch: opts.fetch,
      });
      return finish(opts, findings, parts, timings, parts.endpoint.reachable === false);
    }

    // With --backend cpu the prefill/decode paths run the fast kernels; the reference path always runs the plain ones.
    backend =
      opts.backend === "cpu" ? new CpuBackend(opts.threads !== undefined ? { threads: opts.threads } : {}) : undefined;
    const clean = time("load", () => {
      const weights = loadWeights(backend?.adopt(file) ?? file, config);
      const m = config.arch === "glm-dsa" ? new GlmDsa(config, weights) : new DeepSeek2(config, weights);
      if (backend !== undefined) m.kernels = backend;
      return m;
    });
    const calibrationTokens = encode?.(CALIBRATION_TEXT).filter((t) => t < config.nVocab);
    const probes: Prompt[] = (opts.probes ?? DEFAULT_PROBES).map((text, i) => ({
      label: text.length > 24 ? `${text.slice(0, 24)}…` : text,
      tokens: probeTokens(text, i, config.nVocab, encode),
    }));
    if (opts.endpoint !== undefined) {
      parts.endpoint = await checkEndpoint({
        base: opts.endpoint,
        apiKey: opts.apiKey,
        model: clean,
        tokenizer,
        findings,
        fetch: opts.fetch,
      });
      if (parts.endpoint.reachable === false) return finish(opts, findings, parts, timings, true);
      // The GGUF the server runs may itself be broken in a way every path shares: the file's own behaviour checks.
      parts.behaviour = time("behaviour", () =>
        checkBehaviour(clean, probes, findings, { greedyTokens: 0, chunk: opts.chunk ?? 8, calibrationTokens }),
      );
      return finish(opts, findings, parts, timings);
    }
    const test = opts.implementation?.(clean) ?? clean;
    const chunk = opts.chunk ?? 8;
    // Fast kernels compute in float32 (and may quantize activations): looser per-stage tolerance.
    const loose = backend !== undefined ? { tolerance: 3e-2, klTolerance: 1e-3 } : {};
    parts.paths = time("paths", () =>
      checkPaths(test, findings, {
        prompts: defaultPrompts(config.nVocab, chunk, encode),
        chunk,
        clean,
        ...loose,
        ...(opts.onStep !== undefined ? { onRun: opts.onStep } : {}),
      }),
    );
    parts.behaviour = time("behaviour", () =>
      checkBehaviour(clean, probes, findings, { greedyTokens: opts.greedyTokens ?? 24, chunk, calibrationTokens }),
    );
    return finish(opts, findings, parts, timings);
  } finally {
    backend?.close();
    source?.close();
    file.close();
  }
}

/** A progress line per streamed layer: where the pass is, how long it has run, and about how long it has left. */
export function layerStep(onStep: (message: string) => void): (p: LayerProgress) => void {
  const sec = (ms: number): string => (ms < 100_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 60_000)} min`);
  return (p) =>
    onStep(
      `low-memory layer ${p.done}/${p.layers} (${p.tokens} tokens): ${sec(p.elapsedMs)} elapsed, about ${sec(p.etaMs)} left`,
    );
}

function tryTokenizer(file: GGUFFile): Tokenizer | undefined {
  try {
    return file.metadata.has("tokenizer.ggml.tokens") ? Tokenizer.fromMetadata(file.metadata) : undefined;
  } catch {
    return undefined;
  }
}

/** Prompts of the source logits comparison: two short texts, or id runs without a tokenizer. */
function sourcePrompts(nVocab: number, tokenizer?: Tokenizer): { label: string; tokens: number[] }[] {
  return ["In the beginning God created the heaven and the earth.", DEFAULT_PROBES[0]].map((text, i) => ({
    label: text.length > 24 ? `${text.slice(0, 24)}…` : text,
    tokens: probeTokens(text, i % 2, nVocab, tokenizer ? (t: string): number[] => tokenizer.encode(t) : undefined),
  }));
}

function probeTokens(text: string, i: number, nVocab: number, encode?: (t: string) => number[]): number[] {
  const t = encode?.(text).filter((x) => x < nVocab);
  if (t !== undefined && t.length > 1) return t;
  // No tokenizer: counting = an arithmetic run of ids, repetition = a repeated triple.
  return i === 0
    ? Array.from({ length: 16 }, (_, k) => (10 + k) % nVocab)
    : Array.from({ length: 15 }, (_, k) => [5, 9, 13][k % 3] % nVocab);
}

export { parseConfig };
