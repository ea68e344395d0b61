import type { Command } from "./command.js";
import { logitsCommand } from "./logits.js";
import { runCommand } from "./run.js";

// One line per subcommand; keep alphabetical to avoid merge conflicts.
export const commands: Command[] = [
  logitsCommand,
  runCommand,
];
