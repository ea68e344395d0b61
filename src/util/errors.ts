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

/**
 * A model computed NaN or ±Inf (logits, a sampled step): its weights or hyper-parameters are broken. Not a usage
 * error: the CLI exits 1 for it, as for any other bad file.
 */
export class NonFiniteError extends LatentError {}
