// latent native CPU kernels: the exact-activation integer products of src/backend/cpu/wasm/kernels.as, written for
// AVX-512 (BW, and VNNI where the CPU has it). Same inputs (the arena's byte layout), same results bit for bit: every
// block's integer sums are exact, and each block's f32 term is added in block order with the same f32 operations.
#pragma once
#include <stdint.h>

namespace latent {

/** what the kernels were compiled for: 2 = AVX-512 (F, BW, VL, DQ) + VNNI, 1 = AVX-512 without VNNI, 0 = no vector kernels (use WebAssembly) */
int compiledLevel();

/** whether this CPU runs what compiledLevel() needs (checked before any kernel runs) */
bool cpuSupportsCompiled();

/** whether `type` (a ggml id) has a kernel here */
bool supportsType(int type);

/** the ggml ids with kernels here (what the addon's `types()` reports), `count` of them; none without AVX-512 */
const int* nativeTypes(int* count);

/**
 * kernels.as `matmul` for rows r0 ≤ r < r1 and n tokens (tokens in chunks of tc), exact activations:
 * y[t·yStride + r] = Σ_c W[r][c]·a[t][c], W at w (rowBytes per row), activations aq/ad/asum laid out as `quantize`
 * writes them. All pointers are into one memory at `base` (byte offsets). False (nothing written) for a type without
 * a kernel here or when the scratch cannot be allocated.
 */
bool matmul(uint8_t* base, int type, uint32_t w, uint32_t rowBytes, int r0, int r1, int cols, int n, uint32_t aq,
            uint32_t ad, uint32_t asum, uint32_t y, int yStride, int tc);

/** kernels.as `matmulT` (the transposed product, f32 activations) for tokens t0 ≤ t < t1, same result bits; false as matmul */
bool matmulT(uint8_t* base, int type, uint32_t w, uint32_t rowBytes, int rows, int cols, int t0, int t1, uint32_t x, int xStride,
             uint32_t y, int yStride);

/**
 * kernels.as `attnAbsorbed` (absorbed MLA decode attention for heads h0 ≤ h < h1) and `attnPrefill` (causal prefill
 * attention), same arguments (byte offsets into the memory at `base`) without the WebAssembly scratch, same result
 * bits. False when scratch cannot be allocated (nothing useful written).
 */
bool attnAbsorbed(uint8_t* base, uint32_t C, uint32_t K, int T, int L, int R, uint32_t qc, uint32_t qp, int h0, int h1, float scale,
                  uint32_t out);
bool attnPrefill(uint8_t* base, uint32_t kNope, uint32_t kPe, uint32_t v, uint32_t q, int n, int pos0, int H, int P, int R, int V,
                 int h0, int h1, float scale, uint32_t out);

}  // namespace latent
