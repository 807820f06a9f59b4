// What the page keeps in the browser besides the API key (api.js): the sampling settings
// (the answer format and the tools are not kept: a schema or a tool left from another day
// would constrain answers unseen), and the figures the page measured for each answer (first token, tokens/s), which the
// server does not record.
import { apiKey } from "./api.js";

const $ = (id) => document.getElementById(id);
const SETTINGS_STORAGE = "attnserve.settings";
const FIGURES_STORAGE = "attnserve.figures";  // response id -> {ttftMs, tokensPerSec}
const FIGURES_KEPT = 500;  // answers whose figures are kept (the oldest go first)
export const SETTING_IDS = ["temperature", "top-p", "max-tokens", "seed"];

export function loadSettings() {
  try {
    const s = JSON.parse(localStorage.getItem(SETTINGS_STORAGE) || "{}");
    for (const [id, value] of Object.entries(s)) if ($(id)) $(id).value = value;
  } catch {
    // No storage, or a value from another version: the defaults stand.
  }
  $("api-key").value = apiKey();
  $("json-schema").addEventListener("input", () => checkJsonField("json-schema", SCHEMA_HINT));
  $("tools").addEventListener("input", () => checkJsonField("tools", TOOLS_HINT, (tools) =>
    Array.isArray(tools) ? "" : "Not an array: give [{\"type\": \"function\", \"name\": ...}]."));
}

export function saveSettings() {
  const s = {};
  for (const id of SETTING_IDS) s[id] = $(id).value;
  try {
    localStorage.setItem(SETTINGS_STORAGE, JSON.stringify(s));
  } catch {
    // Not kept: fine.
  }
}

function number(id, fallback) {
  const v = parseFloat($(id).value);
  return Number.isFinite(v) ? v : fallback;
}

export function sampling(newSeed) {
  const seedText = $("seed").value.trim();
  const seed = newSeed || seedText === "" ? Math.floor(Math.random() * 2 ** 31) : parseInt(seedText, 10);
  return {
    temperature: number("temperature", 1),
    top_p: number("top-p", 1),
    max_output_tokens: Math.max(1, Math.round(number("max-tokens", 200))),
    seed,
    ...answerFormat(),
  };
}

// The JSON Schema field as the request's text.format (the Responses API's structured
// outputs); nothing when it is empty. Text that is not JSON is sent as it is (a string
// where the schema goes), so the server's refusal is what the page shows, as for a schema
// it cannot enforce; the hint under the field says so as it is typed.
function answerFormat() {
  const text = $("json-schema").value.trim();
  if (text === "") return {};
  let schema = text;
  try {
    schema = JSON.parse(text);
  } catch {
    // Refused by the server, naming text.format.schema.
  }
  return { text: { format: { type: "json_schema", name: "playground", schema, strict: true } } };
}

const SCHEMA_HINT = "Empty: free text. Else every answer is JSON valid under this schema " +
  "(OpenAI's strict subset; the server refuses, naming it, a keyword it cannot enforce).";

// Marks the field `id` invalid while its text is not JSON, or is JSON that `check` finds a
// problem with (it returns the problem, "" for none); its hint (`id`-hint) shows the
// problem, or `hint` when there is none. An empty field is valid.
function checkJsonField(id, hint, check = () => "") {
  const field = $(id);
  const text = field.value.trim();
  let problem = "";
  if (text !== "") {
    try {
      problem = check(JSON.parse(text));
    } catch (e) {
      problem = `Not JSON: ${e.message}`;
    }
  }
  field.setAttribute("aria-invalid", problem ? "true" : "false");
  $(`${id}-hint`).textContent = problem || hint;
}

// The Tools field as the request's tools, tool_choice and parallel_tool_calls; nothing
// when it is empty. As for the schema, text that is not a JSON array is sent as it is, so
// the server's refusal (naming `tools`) is what the page shows. One call per turn
// (parallel_tool_calls false): a small model seldom ends a list of calls by itself.
export function toolsRequest() {
  const text = $("tools").value.trim();
  if (text === "") return {};
  let tools = text;
  try {
    tools = JSON.parse(text);
  } catch {
    // Refused by the server, naming tools.
  }
  return { tools, tool_choice: $("tool-choice").value, parallel_tool_calls: false };
}

export function toolsDeclared() {
  return $("tools").value.trim() !== "";
}

const TOOLS_HINT = "Empty: none. Else a JSON array of function tools the model may call; " +
  "its calls are shown with their arguments. A turn with tools continues from the " +
  "conversation's last answer but is not added to it.";

export function figures(responseId) {
  try {
    return JSON.parse(localStorage.getItem(FIGURES_STORAGE) || "{}")[responseId] ?? {};
  } catch {
    return {};
  }
}

export function keepFigures(responseId, f) {
  try {
    const all = JSON.parse(localStorage.getItem(FIGURES_STORAGE) || "{}");
    all[responseId] = f;
    const ids = Object.keys(all);
    for (const old of ids.slice(0, Math.max(0, ids.length - FIGURES_KEPT))) delete all[old];
    localStorage.setItem(FIGURES_STORAGE, JSON.stringify(all));
  } catch {
    // Not kept: the page measured them once.
  }
}
