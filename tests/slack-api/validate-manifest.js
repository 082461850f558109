// Validates a Slack app manifest (JSON, on stdin) against Slack's published manifest
// schema (manifest-schema/, from slackapi/manifest-schema) with Ajv. Exit 0 and
// "valid" when it is accepted; exit 1 and Ajv's errors when it is refused; exit 2
// when the input or the schema cannot be read.
"use strict";
const fs = require("fs");
const path = require("path");
const Ajv = require("ajv");
const addFormats = require("ajv-formats");

const dir = path.join(__dirname, "manifest-schema");
const read = (name) => JSON.parse(fs.readFileSync(path.join(dir, name), "utf8"));
// The main schema refers to the versioned ones by their published (tagged) URLs.
const base = "https://raw.githubusercontent.com/slackapi/manifest-schema/v0.5.0/schemas/";
let manifest;
try {
  manifest = JSON.parse(fs.readFileSync(0, "utf8"));
} catch (e) {
  console.error(`the manifest is not JSON: ${e.message}`);
  process.exit(2);
}
// strict: false — the schema uses a keyword of its own (`regex`) Ajv does not know.
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
for (const v of ["1.0.0", "2.0.0"]) {
  const schema = read(`manifest.schema.${v}.json`);
  delete schema.$id;
  ajv.addSchema(schema, `${base}manifest.schema.${v}.json`);
}
const validate = ajv.compile(read("manifest.schema.json"));
if (validate(manifest)) {
  console.log("valid");
  process.exit(0);
}
for (const e of validate.errors) {
  console.log(`${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
}
process.exit(1);
