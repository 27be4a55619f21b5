// Drives the official Resend Node SDK for the Python tests (tests/e2e/test_resend_node_sdk.py).
//
// One JSON line per call on stdin: {"method": "emails.send", "args": [...], "key"?: "...",
// "then"?: {"method": "publish", "args": [...]}} (`then` chains a call on what the method returned).
// `method` is a dotted path on `new Resend(key)` (key defaults to RESEND_API_KEY; the SDK reads
// RESEND_BASE_URL for the server). An argument of the form {"$buffer": "<base64>"} becomes a
// Buffer, so binary attachment content goes through the SDK's own encoding.
// One JSON line per call on stdout: {"data", "error", "headers"} as the SDK returned them, or
// {"value": ...} for a local helper that answers something else (webhooks.verify), or
// {"thrown": "..."} when the call threw.
import { createInterface } from "node:readline";
import { Resend } from "resend";

const clients = new Map();

function client(key) {
  const token = key ?? process.env.RESEND_API_KEY;
  if (!clients.has(token)) clients.set(token, new Resend(token));
  return clients.get(token);
}

function revive(value) {
  if (Array.isArray(value)) return value.map(revive);
  if (value && typeof value === "object") {
    if (typeof value.$buffer === "string") return Buffer.from(value.$buffer, "base64");
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, revive(v)]));
  }
  return value;
}

async function call({ method, args = [], key, then }) {
  const path = method.split(".");
  let owner = client(key);
  for (const part of path.slice(0, -1)) owner = owner[part];
  const fn = owner?.[path.at(-1)];
  if (typeof fn !== "function") return { thrown: `no SDK method ${method}` };
  try {
    let result = fn.apply(owner, revive(args));
    // A chained call on what the method returned, e.g. templates.create(...).publish().
    if (then) result = result[then.method](...revive(then.args ?? []));
    result = await result;
    if (result && typeof result === "object" && "data" in result && "error" in result) {
      const { data, error, headers } = result;
      return { data: data ?? null, error: error ?? null, headers: headers ?? null };
    }
    return { value: result ?? null }; // a local helper, such as webhooks.verify

  } catch (exc) {
    return { thrown: String(exc?.stack ?? exc) };
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    answer = await call(JSON.parse(line));
  } catch (exc) {
    answer = { thrown: String(exc?.stack ?? exc) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
