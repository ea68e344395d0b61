/** Self-contained HTML report of `latent doctor --html` (inline CSS and SVG, no external assets). */
import type { DoctorReport } from "./index.js";
import type { LayerNorms } from "./behaviour.js";

function esc(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function n(x: number | undefined, digits = 3): string {
  if (x === undefined || !Number.isFinite(x)) return String(x);
  return Math.abs(x) >= 1e4 || (Math.abs(x) < 1e-3 && x !== 0) ? x.toExponential(digits - 1) : x.toFixed(digits);
}

/** Line plot of per-layer activation norms (log scale). */
export function normsSvg(norms: readonly LayerNorms[]): string {
  const W = 640;
  const H = 260;
  const pad = 44;
  const series: { name: string; color: string; values: number[] }[] = [
    { name: "residual", color: "#1f77b4", values: norms.map((x) => x.residual) },
    { name: "attention out", color: "#ff7f0e", values: norms.map((x) => x.attn) },
    { name: "FFN/MoE out", color: "#2ca02c", values: norms.map((x) => x.ffn) },
  ];
  const all = series.flatMap((s) => s.values).filter((v) => v > 0 && Number.isFinite(v));
  if (all.length === 0) return "<p>(no finite activation norms)</p>";
  const lo = Math.log10(Math.min(...all));
  const hi = Math.max(lo + 1e-9, Math.log10(Math.max(...all)));
  const nx = Math.max(1, norms.length - 1);
  const px = (i: number): number => pad + (i / nx) * (W - 2 * pad);
  const py = (v: number): number => H - pad - ((Math.log10(v) - lo) / (hi - lo)) * (H - 2 * pad);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="activation norms per layer">`,
  ];
  parts.push(`<rect x="0" y="0" width="${W}" height="${H}" fill="#fff"/>`);
  parts.push(
    `<line x1="${pad}" y1="${H - pad}" x2="${W - pad}" y2="${H - pad}" stroke="#444"/><line x1="${pad}" y1="${pad}" x2="${pad}" y2="${H - pad}" stroke="#444"/>`,
  );
  parts.push(`<text x="${W / 2}" y="${H - 8}" font-size="12" text-anchor="middle">layer</text>`);
  parts.push(
    `<text x="${pad}" y="${pad - 8}" font-size="11">${n(10 ** hi)}</text><text x="4" y="${H - pad}" font-size="11">${n(10 ** lo)}</text>`,
  );
  norms.forEach((x, i) =>
    parts.push(`<text x="${px(i)}" y="${H - pad + 14}" font-size="10" text-anchor="middle">${x.layer}</text>`),
  );
  series.forEach((s, si) => {
    const pts = s.values
      .map((v, i) => (v > 0 && Number.isFinite(v) ? `${px(i).toFixed(1)},${py(v).toFixed(1)}` : ""))
      .filter((p) => p !== "");
    parts.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${pts.join(" ")}"/>`);
    pts.forEach((p) => {
      const [x, y] = p.split(",");
      parts.push(`<circle cx="${x}" cy="${y}" r="3" fill="${s.color}"/>`);
    });
    parts.push(
      `<rect x="${W - pad - 120}" y="${pad + si * 16 - 9}" width="10" height="10" fill="${s.color}"/><text x="${W - pad - 105}" y="${pad + si * 16}" font-size="11">${esc(s.name)}</text>`,
    );
  });
  parts.push("</svg>");
  return parts.join("");
}

export function renderHtml(r: DoctorReport): string {
  const sevColor = { error: "#c0392b", warning: "#d68910", info: "#566573" } as const;
  const rows = r.findings
    .map(
      (f) =>
        `<tr><td style="color:${sevColor[f.severity]};font-weight:bold">${f.severity}</td><td>${esc(f.area)}</td><td><code>${esc(f.code)}</code></td><td>${esc(f.message)}</td></tr>`,
    )
    .join("\n");
  const out: string[] = [
    '<!doctype html><html><head><meta charset="utf-8"><title>latent doctor report</title>',
    "<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top;font-size:13px}th{background:#f4f4f4}.v{font-size:1.4em;font-weight:bold}</style></head><body>",
    `<h1>latent doctor</h1><p>model <code>${esc(r.target.model)}</code>${r.target.endpoint ? `, endpoint <code>${esc(r.target.endpoint)}</code>` : ""}</p>`,
    `<p class="v" style="color:${r.verdict === "healthy" ? "#1e8449" : "#c0392b"}">${esc(r.verdict)} (exit ${r.exitCode})</p>`,
    `<h2>Findings</h2><table><tr><th>severity</th><th>area</th><th>code</th><th>message</th></tr>${rows || "<tr><td colspan=4>none</td></tr>"}</table>`,
  ];
  if (r.file) {
    out.push(
      `<h2>File</h2><p>${esc(r.file.arch ?? "?")}, ${esc(r.file.generation)} generation, ${r.file.tensorCount} tensors, ${(r.file.bytes / 1e6).toFixed(1)} MB, types ${esc(JSON.stringify(r.file.types))}</p>`,
    );
  }
  if (r.paths) {
    out.push(
      "<h2>Paths vs reference</h2><table><tr><th>prompt</th><th>tokens</th><th>path</th><th>max KL</th><th>top-1</th><th>first divergence</th></tr>",
    );
    for (const c of r.paths.comparisons) {
      const d = c.firstDivergence;
      out.push(
        `<tr><td>${esc(c.prompt)}</td><td>${c.tokens}</td><td>${esc(c.path)}</td><td>${n(c.maxKL)}</td><td>${(c.top1Agreement * 100).toFixed(0)}%</td><td>${d ? `layer ${d.layer}, ${esc(d.stage)} (${n(d.relDiff)}, ${d.symptom})` : "—"}</td></tr>`,
      );
    }
    out.push("</table>");
  }
  if (r.behaviour) {
    const b = r.behaviour;
    out.push(
      "<h2>Behaviour</h2><table><tr><th>probe</th><th>tokens</th><th>entropy (nats)</th><th>entropy / ln V</th><th>top-1</th><th>p(top-1)</th></tr>",
    );
    for (const p of b.probes)
      out.push(
        `<tr><td>${esc(p.label)}</td><td>${p.tokens}</td><td>${n(p.entropy)}</td><td>${n(p.entropyRatio)}</td><td>${p.top1}</td><td>${n(p.top1Prob)}</td></tr>`,
      );
    out.push("</table>");
    if (b.greedy)
      out.push(
        `<p>greedy after “${esc(b.greedy.prompt)}”: ${esc(b.greedy.generated.join(" "))}${b.greedy.loop ? ` — loop of period ${b.greedy.loop.period} ×${b.greedy.loop.repeats}` : ""}</p>`,
      );
    out.push("<h3>Activation norms per layer</h3>", normsSvg(b.norms));
    out.push(
      "<table><tr><th>layer</th><th>residual RMS</th><th>attention RMS</th><th>FFN RMS</th><th>max |x|</th><th>max |q_abs|</th></tr>",
    );
    for (const x of b.norms)
      out.push(
        `<tr><td>${x.layer}</td><td>${n(x.residual)}</td><td>${n(x.attn)}</td><td>${n(x.ffn)}</td><td>${n(x.absMax)}</td><td>${n(x.qAbsMax)}</td></tr>`,
      );
    out.push("</table>");
  }
  if (r.endpoint) {
    const e = r.endpoint;
    out.push(
      `<h2>Endpoint</h2><p>${esc(e.base)} — mode ${esc(e.mode)}, verdict <b>${esc(e.verdict)}</b>, mean KL ${n(e.meanKL)}, top-1 ${(e.top1Agreement * 100).toFixed(0)}%</p>`,
    );
    out.push(
      "<table><tr><th>pos</th><th>next</th><th>KL (top-k)</th><th>top-1 match</th><th>ref logprob</th><th>endpoint logprob</th></tr>",
    );
    for (const p of e.positions)
      out.push(
        `<tr><td>${p.pos}</td><td>${p.next ?? ""}</td><td>${n(p.kl)}</td><td>${p.top1Match ? "yes" : "no"}</td><td>${n(p.refLogprob)}</td><td>${n(p.endpointLogprob)}</td></tr>`,
      );
    out.push("</table>");
  }
  if (r.lowMemory) out.push(`<h2>Low-memory reference</h2><pre>${esc(JSON.stringify(r.lowMemory, null, 2))}</pre>`);
  out.push("</body></html>\n");
  return out.join("\n");
}
