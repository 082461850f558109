// Validates GraphQL documents against Linear's published schema (schema.graphql,
// from github.com/linear/linear packages/sdk/src/schema.graphql, MIT) with
// graphql-js: one JSON line {"query": "..."} in, one JSON line
// {"ok": true} or {"ok": false, "errors": ["..."]} out.
"use strict";
const fs = require("fs");
const path = require("path");
const readline = require("readline");
const { buildSchema, parse, validate } = require("graphql");

const schema = buildSchema(fs.readFileSync(path.join(__dirname, "schema.graphql"), "utf8"));
const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  let out;
  try {
    const { query } = JSON.parse(line);
    const errors = validate(schema, parse(query));
    out = errors.length === 0 ? { ok: true } : { ok: false, errors: errors.map((e) => e.message) };
  } catch (e) {
    out = { ok: false, errors: [String(e && e.message ? e.message : e)] };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
});
process.stdout.write(JSON.stringify({ ready: true }) + "\n");
