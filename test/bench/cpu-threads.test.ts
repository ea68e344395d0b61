// bench/cpu.ts's --threads list: "2", "1,2,all" (all = the machine's parallelism), duplicates dropped in order.
import { test } from "node:test";
import assert from "node:assert/strict";
import { threadCounts } from "../../bench/cpu.js";

test("--threads: one count, a list with all, duplicates dropped in the order given", () => {
  const all = 3 + Math.floor(Math.random() * 60);
  assert.deepEqual(threadCounts("2", all), [2]);
  assert.deepEqual(threadCounts("1,2,all", all), [1, 2, all]);
  assert.deepEqual(threadCounts("all, 1 ,all,1", all), [all, 1]);
  assert.deepEqual(threadCounts("1,2,all", 2), [1, 2]);
});

test("--threads: anything but positive integers and all is refused", () => {
  for (const bad of ["0", "-1", "1.5", "x", "", "1,,2", "ALL"]) assert.throws(() => threadCounts(bad, 2), /--threads/);
});
