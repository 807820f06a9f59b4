// The HTTP API as the page uses it: JSON requests with the API key, the server's own
// error messages, and the server-sent events of a streamed response. No UI here.

const KEY_STORAGE = "attnserve.apiKey";

// An error to show as it is: `message` is the server's `error.message` when it sent one.
export class ApiError extends Error {
  constructor(status, message, code = null) {
    super(message);
    this.name = "ApiError";
    this.status = status;  // HTTP status; 0 when the server could not be reached
    this.code = code;      // the server's error.code, when it sent one
  }
}

export function apiKey() {
  try {
    return localStorage.getItem(KEY_STORAGE) || "";
  } catch {
    return "";  // storage turned off: no key kept
  }
}

export function setApiKey(key) {
  try {
    if (key) localStorage.setItem(KEY_STORAGE, key);
    else localStorage.removeItem(KEY_STORAGE);
  } catch {
    // Storage turned off: the key lasts until the page is closed (see keyOverride).
  }
  keyOverride = key;
}
let keyOverride = null;

function headers(hasBody) {
  const h = {};
  if (hasBody) h["content-type"] = "application/json";
  const key = keyOverride ?? apiKey();
  if (key) h.authorization = `Bearer ${key}`;
  return h;
}

async function errorOf(res) {
  let message = `HTTP ${res.status} ${res.statusText}`.trim();
  let code = null;
  try {
    const body = await res.json();
    if (body?.error?.message) message = body.error.message;
    code = body?.error?.code ?? null;
  } catch {
    // Not JSON (a proxy's page): the status line is all there is.
  }
  return new ApiError(res.status, message, code);
}

// fetch() with the key; a non-2xx answer throws ApiError with the server's message.
// An aborted `signal` throws the DOMException named "AbortError", untouched.
async function send(method, path, body, signal) {
  let res;
  try {
    res = await fetch(path, {
      method,
      headers: headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
    });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, `Cannot reach the server: ${e.message}`);
  }
  if (!res.ok) throw await errorOf(res);
  return res;
}

export async function getJson(path) {
  return (await send("GET", path)).json();
}

export async function postJson(path, body = {}) {
  return (await send("POST", path, body)).json();
}

export async function deleteJson(path) {
  return (await send("DELETE", path)).json();
}

// Every item of a conversation, oldest first (pages of 100).
export async function conversationItems(id) {
  const items = [];
  let after = "";
  for (;;) {
    const q = new URLSearchParams({ order: "asc", limit: "100" });
    if (after) q.set("after", after);
    const page = await getJson(`/v1/conversations/${encodeURIComponent(id)}/items?${q}`);
    items.push(...page.data);
    if (!page.has_more || !page.last_id) return items;
    after = page.last_id;
  }
}

// POST `body` (with stream: true) to `path` and yield each server-sent event's data,
// parsed, with its `type`. Comments (": ping") are skipped. Throws ApiError for an
// answer that is not a stream, and AbortError when `signal` aborts.
export async function* streamEvents(path, body, signal) {
  const res = await send("POST", path, { ...body, stream: true }, signal);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = parseEvent(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (event) yield event;
      }
    }
  } finally {
    reader.releaseLock();
  }
  const last = parseEvent(buffer);
  if (last) yield last;
}

function parseEvent(block) {
  let name = "";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":") || line === "") continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
  }
  if (data.length === 0 || data.join("\n") === "[DONE]") return null;
  const parsed = JSON.parse(data.join("\n"));
  if (!parsed.type) parsed.type = name;
  return parsed;
}
