import type { Command } from "./command.js";
import { chatCommand } from "./chat.js";
import { convertCommand } from "./convert.js";
import { demoCommand } from "./demo.js";
import { doctorCommand } from "./doctor.js";
import { inspectCommand } from "./inspect.js";
import { logitsCommand } from "./logits.js";
import { runCommand } from "./run.js";
import { serveCommand } from "./serve.js";
import { synthCommand } from "./synth.js";

// One line per subcommand; keep alphabetical to avoid merge conflicts.
export const commands: Command[] = [
  chatCommand,
  convertCommand,
  demoCommand,
  doctorCommand,
  inspectCommand,
  logitsCommand,
  runCommand,
  serveCommand,
  synthCommand,
];
