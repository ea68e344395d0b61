{
  "targets": [
    {
      "target_name": "latent_cpu",
      "sources": ["cpu/addon.cc", "cpu/kernels.cc", "cpu/rows.cc", "cpu/prefill.cc", "cpu/decode.cc", "cpu/transposed.cc", "cpu/attention.cc"],
      "cflags_cc": ["-O3", "-march=native", "-ffp-contract=off", "-fno-fast-math", "-std=c++17", "-Wno-uninitialized", "-Wno-maybe-uninitialized"],
      "cflags_cc!": ["-fno-exceptions"],
      "xcode_settings": { "OTHER_CPLUSPLUSFLAGS": ["-O3", "-march=native", "-ffp-contract=off", "-std=c++17"] }
    }
  ]
}
