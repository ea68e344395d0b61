// The bundled demo model (models/README.md) that the page's "Try the demo model" button loads. vite.config.ts serves
// the repository's copy (dev) and writes it into the build output (build) at this same path beside the page, so one
// constant names the file in the repository and the URL relative to the page.
export const DEMO_MODEL_PATH = "models/latent-demo-kjv.gguf";

/** The demo was trained on the King James Bible and never saw chat data: it is shown continuing this text. */
export const DEMO_PROMPT = "And it came to pass, when the king";
