// The types: protocol.d.ts is what the schema generates today, and the API's declarations
// type-check a client written against them (tsc, strict).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));

test("protocol.d.ts is generated from docs/schema and up to date", () => {
  const run = spawnSync(process.execPath, ["scripts/generate-types.mjs", "--check"], { cwd: root, encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
});

test("weft-client.d.ts type-checks a client (tsc --strict)", () => {
  const run = spawnSync(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "."], { cwd: root, encoding: "utf8" });
  assert.equal(run.status, 0, run.stdout + run.stderr);
});
