/** Findings and the report of `latent doctor` (JSON shape: docs/doctor.md). */

export const DOCTOR_FORMAT = "latent-doctor/1";

/** error: a defect that makes output wrong (exit 1); warning: a quirk worth knowing, output may still be right; info: a note. */
export type Severity = "error" | "warning" | "info";

export type CheckArea =
  | "file"
  | "metadata"
  | "tensors"
  | "names"
  | "paths"
  | "behaviour"
  | "endpoint"
  | "low-memory"
  | "source";

export interface Finding {
  readonly area: CheckArea;
  readonly severity: Severity;
  /** stable machine-readable id, e.g. "gating-missing-with-bias" */
  readonly code: string;
  readonly message: string;
  /** numbers and names that back the message */
  readonly evidence?: Readonly<Record<string, unknown>>;
}

export class Findings {
  readonly list: Finding[] = [];
  add(area: CheckArea, severity: Severity, code: string, message: string, evidence?: Record<string, unknown>): void {
    this.list.push({ area, severity, code, message, ...(evidence !== undefined ? { evidence } : {}) });
  }
  get errors(): Finding[] {
    return this.list.filter((f) => f.severity === "error");
  }
}

export type Verdict = "healthy" | "problems" | "could-not-run";

export function exitCodeOf(verdict: Verdict): 0 | 1 | 2 {
  return verdict === "healthy" ? 0 : verdict === "problems" ? 1 : 2;
}

export function verdictOf(findings: readonly Finding[]): Verdict {
  return findings.some((f) => f.severity === "error") ? "problems" : "healthy";
}

/** A progress sink (a cli-progress bar on a TTY, else nothing). */
export interface Progress {
  start(label: string, total: number): void;
  update(done: number): void;
  stop(): void;
}

export const noProgress: Progress = { start: () => {}, update: () => {}, stop: () => {} };

/** Largest |x| that fp16 can hold. */
export const FP16_MAX = 65504;
