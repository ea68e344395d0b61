// Byte counts from the command line (--gpu-memory): suffixes as powers of 1024, and clear errors for anything else.
import { test } from "node:test";
import assert from "node:assert/strict";
import { parseByteSize } from "../../src/util/byte-size.js";
import { UsageError } from "../../src/util/errors.js";

test("parseByteSize: plain bytes and K/M/G/T suffixes (with B or iB, any case) as powers of 1024", () => {
  assert.equal(parseByteSize("1000000"), 1000000);
  assert.equal(parseByteSize("512M"), 512 * 2 ** 20);
  assert.equal(parseByteSize("24G"), 24 * 2 ** 30);
  assert.equal(parseByteSize("24gib"), 24 * 2 ** 30);
  assert.equal(parseByteSize("1.5G"), 1.5 * 2 ** 30);
  assert.equal(parseByteSize("2TB"), 2 * 2 ** 40);
  assert.equal(parseByteSize("64k"), 65536);
});

test("parseByteSize: anything else is a usage error naming the option and the text", () => {
  for (const bad of ["", "G", "-1G", "12X", "1e9", "0", "0.1"])
    assert.throws(
      () => parseByteSize(bad, "--gpu-memory"),
      (e: unknown) =>
        e instanceof UsageError && e.message.startsWith("--gpu-memory:") && e.message.includes(`'${bad}'`),
      bad,
    );
});
