// N-API face of the native CPU kernels (kernels.h), loaded by src/backend/cpu/native.ts on the main thread and in
// every worker of the CPU backend's pool. Arguments are the WebAssembly kernels' own (byte offsets into a shared
// WebAssembly memory) with the memory's base address first.
#include <node_api.h>
#include <stdint.h>

#include "kernels.h"

namespace {

napi_value Throw(napi_env env, const char* message) {
  napi_throw_error(env, nullptr, message);
  return nullptr;
}

napi_value Number(napi_env env, double v) {
  napi_value r;
  napi_create_double(env, v, &r);
  return r;
}

/** { level, usable }: the instruction set compiled for (2 AVX-512 + VNNI, 1 AVX-512, 0 none) and whether this CPU runs it */
napi_value Info(napi_env env, napi_callback_info) {
  napi_value o;
  napi_create_object(env, &o);
  napi_set_named_property(env, o, "level", Number(env, latent::compiledLevel()));
  napi_value usable;
  napi_get_boolean(env, latent::compiledLevel() > 0 && latent::cpuSupportsCompiled(), &usable);
  napi_set_named_property(env, o, "usable", usable);
  return o;
}

/** types(): the ggml type ids the native products take */
napi_value Types(napi_env env, napi_callback_info) {
  int count = 0;
  const int* types = latent::nativeTypes(&count);
  napi_value a;
  napi_create_array_with_length(env, size_t(count), &a);
  for (int i = 0; i < count; i++) napi_set_element(env, a, uint32_t(i), Number(env, types[i]));
  return a;
}

/** base(view): the address of a typed array's first byte (a shared WebAssembly memory's buffer), as a number */
napi_value Base(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_typedarray_type t;
  size_t length;
  void* data = nullptr;
  napi_value buffer;
  size_t offset;
  if (napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr) != napi_ok || argc < 1 ||
      napi_get_typedarray_info(env, argv[0], &t, &length, &data, &buffer, &offset) != napi_ok || t != napi_uint8_array)
    return Throw(env, "base(view): a Uint8Array");
  return Number(env, static_cast<double>(reinterpret_cast<uintptr_t>(data)));
}

/** matmul(base, type, w, rowBytes, r0, r1, cols, n, x, xStride, aq, ad, asum, y, yStride, S, tc): kernels.as's matmul */
napi_value Matmul(napi_env env, napi_callback_info info) {
  size_t argc = 17;
  napi_value argv[17];
  if (napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr) != napi_ok || argc < 17)
    return Throw(env, "matmul: 17 arguments");
  double base;
  int64_t v[16];
  if (napi_get_value_double(env, argv[0], &base) != napi_ok) return Throw(env, "matmul: base must be a number");
  for (int i = 0; i < 16; i++)
    if (napi_get_value_int64(env, argv[i + 1], &v[i]) != napi_ok) return Throw(env, "matmul: arguments must be numbers");
  uint8_t* p = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(base));
  // v: type w rowBytes r0 r1 cols n x xStride aq ad asum y yStride S tc (x, xStride, S: WebAssembly only)
  if (!latent::matmul(p, int(v[0]), uint32_t(v[1]), uint32_t(v[2]), int(v[3]), int(v[4]), int(v[5]), int(v[6]),
                      uint32_t(v[9]), uint32_t(v[10]), uint32_t(v[11]), uint32_t(v[12]), int(v[13]), int(v[15])))
    return Throw(env, "matmul: type without a native kernel, or no memory for its scratch");
  return nullptr;
}

/** reads n numbers (after the memory's base address) into v; false with an exception pending otherwise */
bool Args(napi_env env, napi_callback_info info, size_t n, double* base, double* v) {
  napi_value argv[24];
  size_t argc = 24;
  if (napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr) != napi_ok || argc < n + 1) {
    Throw(env, "too few arguments");
    return false;
  }
  if (napi_get_value_double(env, argv[0], base) != napi_ok) {
    Throw(env, "base must be a number");
    return false;
  }
  for (size_t i = 0; i < n; i++)
    if (napi_get_value_double(env, argv[i + 1], &v[i]) != napi_ok) {
      Throw(env, "arguments must be numbers");
      return false;
    }
  return true;
}

uint8_t* Ptr(double base) { return reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(base)); }

/** matmulT(base, type, w, rowBytes, rows, cols, t0, t1, x, xStride, y, yStride, S): kernels.as's (S unused) */
napi_value MatmulT(napi_env env, napi_callback_info info) {
  double b, v[12];
  if (!Args(env, info, 12, &b, v)) return nullptr;
  if (!latent::matmulT(Ptr(b), int(v[0]), uint32_t(v[1]), uint32_t(v[2]), int(v[3]), int(v[4]), int(v[5]), int(v[6]), uint32_t(v[7]),
                       int(v[8]), uint32_t(v[9]), int(v[10])))
    return Throw(env, "matmulT: type without a native kernel, or no memory for its scratch");
  return nullptr;
}

/** attnAbsorbed(base, C, K, T, L, R, qc, qp, h0, h1, scale, sc, out): kernels.as's (sc unused) */
napi_value AttnAbsorbed(napi_env env, napi_callback_info info) {
  double b, v[12];
  if (!Args(env, info, 12, &b, v)) return nullptr;
  if (!latent::attnAbsorbed(Ptr(b), uint32_t(v[0]), uint32_t(v[1]), int(v[2]), int(v[3]), int(v[4]), uint32_t(v[5]), uint32_t(v[6]),
                            int(v[7]), int(v[8]), float(v[9]), uint32_t(v[11])))
    return Throw(env, "attnAbsorbed: no memory for its scratch");
  return nullptr;
}

/** attnPrefill(base, kNope, kPe, v, q, n, pos0, H, P, R, V, h0, h1, scale, sc, out): kernels.as's (sc unused) */
napi_value AttnPrefill(napi_env env, napi_callback_info info) {
  double b, v[15];
  if (!Args(env, info, 15, &b, v)) return nullptr;
  if (!latent::attnPrefill(Ptr(b), uint32_t(v[0]), uint32_t(v[1]), uint32_t(v[2]), uint32_t(v[3]), int(v[4]), int(v[5]), int(v[6]),
                           int(v[7]), int(v[8]), int(v[9]), int(v[10]), int(v[11]), float(v[12]), uint32_t(v[14])))
    return Throw(env, "attnPrefill: no memory for its scratch");
  return nullptr;
}

}  // namespace

NAPI_MODULE_INIT() {
  const napi_property_descriptor fns[] = {
      {"info", nullptr, Info, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
      {"types", nullptr, Types, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
      {"base", nullptr, Base, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
      {"matmul", nullptr, Matmul, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
      {"matmulT", nullptr, MatmulT, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
      {"attnAbsorbed", nullptr, AttnAbsorbed, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
      {"attnPrefill", nullptr, AttnPrefill, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
  };
  napi_define_properties(env, exports, sizeof(fns) / sizeof(fns[0]), fns);
  return exports;
}
