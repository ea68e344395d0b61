/** Base of every error latent raises on purpose: the message names the file, key or tensor at fault. */
export class LatentError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** A GGUF file is malformed, truncated, hostile or inconsistent. */
export class GGUFError extends LatentError {}

/** A tensor uses a quantization type latent cannot decode (or the type id is unknown). */
export class QuantTypeError extends LatentError {}

/** Model metadata or tensors are missing or inconsistent for the architecture. */
export class ModelConfigError extends LatentError {}

/** Bad user input at the CLI or API level. */
export class UsageError extends LatentError {}
