// Test helper: `latent doctor MODEL --source SRC --json` through the CLI, its exit code and parsed report.
import { doctorMain } from "../../src/cli/doctor.js";
import type { DoctorReport } from "../../src/doctor/index.js";
import type { Finding } from "../../src/doctor/report.js";
import { rewriteGGUF } from "./gguf-rewrite.js";
import type { TensorEdit } from "./source-faults.js";

export interface SourceRun {
  readonly code: number;
  readonly report: DoctorReport;
  readonly errors: Finding[];
  readonly stderr: string;
}

export async function doctorWithSource(model: string, source: string): Promise<SourceRun> {
  let out = "";
  let err = "";
  const code = await doctorMain([model, "--source", source, "--json"], {
    out: (t) => void (out += t),
    err: (t) => void (err += t),
    tty: false,
  });
  const report = JSON.parse(out) as DoctorReport;
  return { code, report, errors: report.findings.filter((f) => f.severity === "error"), stderr: err };
}

/** A copy of `base` with `edit` applied, at `path`. */
export function faulted(base: string, path: string, edit: TensorEdit): string {
  return rewriteGGUF(base, path, { tensors: edit });
}
