// The shape of src/ read from its imports: layers, cycles, upward imports, lines per folder, the longest files and
// functions. `node --import tsx tools/arch/structure.ts [--json]`; test/arch/layers.test.ts holds the rules.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";

/** The dependency order: a module may import only from its own layer or one listed before it. */
export const LAYERS: readonly string[][] = [
  ["util"],
  ["quant"],
  ["gguf"],
  ["tokenizer"],
  ["tensor"],
  ["model"],
  ["synth", "convert"],
  ["engine"],
  ["backend"],
  ["runtime"],
  ["doctor", "server", "cli", "web", "index.ts"],
];

export interface ImportEdge {
  from: string;
  to: string;
}

export interface Structure {
  files: string[];
  edges: ImportEdge[];
  cycles: string[][];
  upward: ImportEdge[];
  unknownLayer: string[];
  linesPerFolder: Record<string, number>;
  longestFiles: { file: string; lines: number }[];
  longestFunctions: { file: string; name: string; lines: number }[];
}

function listTs(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) out.push(...listTs(path));
    else if (entry.endsWith(".ts") && !entry.endsWith(".d.ts")) out.push(path);
  }
  return out.sort();
}

/** The layer index of a file under src/ (its first folder, or the file itself at the top). */
export function layerOf(srcRelative: string): number {
  const head = srcRelative.split("/")[0] ?? srcRelative;
  return LAYERS.findIndex((names) => names.includes(head));
}

function resolveSpecifier(fromFile: string, spec: string, known: Set<string>): string | undefined {
  if (!spec.startsWith(".")) return undefined;
  const base = resolve(dirname(fromFile), spec);
  for (const candidate of [base.replace(/\.js$/, ".ts"), base, `${base}.ts`, join(base, "index.ts")]) {
    if (known.has(candidate)) return candidate;
  }
  return undefined;
}

function importsOf(source: ts.SourceFile): string[] {
  const specs: string[] = [];
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier) {
      if (ts.isStringLiteral(node.moduleSpecifier)) specs.push(node.moduleSpecifier.text);
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] &&
      ts.isStringLiteral(node.arguments[0])
    ) {
      specs.push(node.arguments[0].text);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      const lit = node.argument.literal;
      if (ts.isStringLiteral(lit)) specs.push(lit.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return specs;
}

function functionsOf(source: ts.SourceFile): { name: string; lines: number }[] {
  const out: { name: string; lines: number }[] = [];
  const lineOf = (pos: number): number => source.getLineAndCharacterOfPosition(pos).line;
  const visit = (node: ts.Node, owner: string): void => {
    let name: string | undefined;
    if (ts.isFunctionDeclaration(node) && node.body) name = node.name?.text ?? "(default)";
    else if ((ts.isMethodDeclaration(node) || ts.isConstructorDeclaration(node)) && node.body) {
      const method = ts.isConstructorDeclaration(node) ? "constructor" : node.name.getText(source);
      name = owner ? `${owner}.${method}` : method;
    } else if (
      ts.isVariableDeclaration(node) &&
      node.initializer &&
      (ts.isArrowFunction(node.initializer) || ts.isFunctionExpression(node.initializer))
    ) {
      name = node.name.getText(source);
    }
    if (name) out.push({ name, lines: lineOf(node.getEnd()) - lineOf(node.getStart(source)) + 1 });
    const nextOwner = ts.isClassDeclaration(node) ? (node.name?.text ?? "(class)") : owner;
    ts.forEachChild(node, (child) => visit(child, nextOwner));
  };
  visit(source, "");
  return out;
}

/** Tarjan's strongly connected components of size > 1 (or a file importing itself). */
function cyclesOf(files: string[], edges: ImportEdge[]): string[][] {
  const next = new Map<string, string[]>(files.map((f) => [f, []]));
  for (const e of edges) next.get(e.from)?.push(e.to);
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const out: string[][] = [];
  const strong = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter);
    counter++;
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v) ?? 0, low.get(w) ?? 0));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) ?? 0, index.get(w) ?? 0));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string | undefined;
      do {
        w = stack.pop();
        if (w === undefined) break;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (next.get(v) ?? []).includes(v)) out.push(component.sort());
    }
  };
  for (const f of files) if (!index.has(f)) strong(f);
  return out;
}

export function readStructure(root: string): Structure {
  const srcDir = join(root, "src");
  const absolute = listTs(srcDir);
  const known = new Set(absolute);
  const rel = (f: string): string => relative(srcDir, f);
  const edges: ImportEdge[] = [];
  const linesPerFolder: Record<string, number> = {};
  const longestFiles: { file: string; lines: number }[] = [];
  const longestFunctions: { file: string; name: string; lines: number }[] = [];
  for (const file of absolute) {
    const text = readFileSync(file, "utf8");
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true);
    for (const spec of importsOf(source)) {
      const target = resolveSpecifier(file, spec, known);
      if (target) edges.push({ from: rel(file), to: rel(target) });
    }
    const lines = text.split("\n").length;
    const folder = dirname(rel(file));
    linesPerFolder[folder] = (linesPerFolder[folder] ?? 0) + lines;
    longestFiles.push({ file: rel(file), lines });
    for (const fn of functionsOf(source)) longestFunctions.push({ file: rel(file), ...fn });
  }
  const files = absolute.map(rel);
  const upward = edges.filter((e) => layerOf(e.to) > layerOf(e.from));
  const unknownLayer = files.filter((f) => layerOf(f) < 0);
  longestFiles.sort((a, b) => b.lines - a.lines);
  longestFunctions.sort((a, b) => b.lines - a.lines);
  return {
    files,
    edges,
    cycles: cyclesOf(files, edges),
    upward,
    unknownLayer,
    linesPerFolder,
    longestFiles,
    longestFunctions,
  };
}

function main(): void {
  const root = resolve(dirname(new URL(import.meta.url).pathname), "../..");
  const s = readStructure(root);
  if (process.argv.includes("--json")) {
    console.log(JSON.stringify(s, null, 2));
    return;
  }
  const total = Object.values(s.linesPerFolder).reduce((a, b) => a + b, 0);
  console.log(`src/: ${s.files.length} files, ${total} lines, ${s.edges.length} imports`);
  console.log(`\ncycles: ${s.cycles.length}`);
  for (const c of s.cycles) console.log(`  ${c.length} files: ${c.join(" ↔ ")}`);
  console.log(`\nupward imports: ${s.upward.length}`);
  for (const e of s.upward) console.log(`  ${e.from} → ${e.to}`);
  if (s.unknownLayer.length) console.log(`\nfiles outside every layer: ${s.unknownLayer.join(", ")}`);
  console.log("\nlines per folder:");
  for (const [folder, lines] of Object.entries(s.linesPerFolder).sort((a, b) => b[1] - a[1])) {
    console.log(`  ${String(lines).padStart(6)}  ${folder}`);
  }
  console.log("\nlongest files:");
  for (const f of s.longestFiles.slice(0, 10)) console.log(`  ${String(f.lines).padStart(6)}  ${f.file}`);
  console.log("\nlongest functions:");
  for (const f of s.longestFunctions.slice(0, 10)) {
    console.log(`  ${String(f.lines).padStart(6)}  ${f.file}: ${f.name}`);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(new URL(import.meta.url).pathname)) main();
