import type { Command } from "./command.js";

// One line per subcommand; keep alphabetical to avoid merge conflicts.
export const commands: Command[] = [];
