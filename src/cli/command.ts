/** One `latent` subcommand. Each lives in its own file under src/cli and is listed in commands.ts. */
export interface Command {
  readonly name: string;
  readonly summary: string;
  run(argv: string[]): Promise<void>;
}
