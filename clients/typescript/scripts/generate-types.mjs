// Generates protocol.d.ts from the JSON Schema of the frames (docs/schema/, itself generated
// from the weft-protocol crate), so the client's types cannot drift from the server's.
// `node scripts/generate-types.mjs` writes it; `--check` fails when the committed file differs.
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { compile } from "json-schema-to-typescript";

const root = new URL("../../../", import.meta.url);
const target = fileURLToPath(new URL("../protocol.d.ts", import.meta.url));
const options = { bannerComment: "", additionalProperties: false, strictIndexSignatures: false, format: true };

// Both documents in one, so the definitions they share (ContentPart, PermissionMode) are
// declared once: their `$defs` merged (a name defined differently in the two is an error).
const defs = {};
const frames = {};
for (const name of ["client_frame", "server_frame"]) {
  const { $defs, $schema, ...frame } = JSON.parse(readFileSync(new URL(`docs/schema/${name}.json`, root), "utf8"));
  for (const [key, value] of Object.entries($defs)) {
    if (key in defs && JSON.stringify(defs[key]) !== JSON.stringify(value)) {
      throw new Error(`${key} is defined differently in the two schema documents`);
    }
    defs[key] = value;
  }
  defs[frame.title] = frame;
  frames[frame.title] = { $ref: `#/$defs/${frame.title}` };
}
const protocol = { title: "Frames", type: "object", properties: frames, additionalProperties: false, $defs: defs };
const out = "// The Weft wire protocol's frames, generated from docs/schema/*.json by\n" +
  "// scripts/generate-types.mjs. Do not edit by hand.\n\n" +
  (await compile(protocol, "Frames", options));

if (process.argv.includes("--check")) {
  const committed = readFileSync(target, "utf8");
  if (committed !== out) {
    console.error("protocol.d.ts is out of date: run `npm run generate` in clients/typescript");
    process.exit(1);
  }
} else {
  writeFileSync(target, out);
}
