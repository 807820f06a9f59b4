// The playground page: models, conversations kept on the server, streamed turns, stop,
// fork and regenerate. HTTP in api.js, list drawing in view.js; this file owns the state.
import {
  ApiError, apiKey, setApiKey, getJson, postJson, deleteJson, conversationItems, streamEvents,
} from "./api.js";
import { formatBytes, messageElement, updateMessage, renderConversations } from "./view.js";

const $ = (id) => document.getElementById(id);
const SETTINGS_STORAGE = "attnserve.settings";
const FIGURES_STORAGE = "attnserve.figures";  // response id -> {ttftMs, tokensPerSec}
const BUSY_RETRY_MS = 15000;  // how long a turn retries a 409 (the previous turn ending)
const MIN_TIMED_MS = 50;  // the shortest decode the page reports tokens/s for

const state = {
  models: [],
  conversations: [],
  current: null,   // the open conversation object, or null for a new one
  model: null,     // the conversation's model once its first response fixed it
  messages: [],    // message objects (view.js), oldest first
  turn: null,      // {controller, msg} while a turn streams
  loadSeq: 0,      // drops a conversation load that a later one overtook
};

const actions = { fork: (msg) => guard(forkAt(msg)), regenerate: () => guard(regenerate()) };

// ---- errors and status ------------------------------------------------------------
// The server's message as it sent it, and on a second line what the page suggests.
function showError(message, hint = "") {
  const box = $("error");
  box.replaceChildren();
  if (message) {
    const text = document.createElement("span");
    text.className = "error-message";
    text.textContent = message;
    box.append(text);
  }
  if (hint) {
    const p = document.createElement("span");
    p.className = "error-hint";
    p.textContent = hint;
    box.append(p);
  }
  box.hidden = !message;
}

function errorText(e) {
  return `${e?.message ?? e}`;
}

function errorHint(e) {
  if (!(e instanceof ApiError)) return "";
  if (e.status === 401) return "Set the API key under Settings.";
  if (e.status === 0) return "Is attnserve_server running, and is this its HTTP address?";
  return "";
}

async function guard(promise) {
  try {
    await promise;
  } catch (e) {
    if (e?.name === "AbortError") return;
    showError(errorText(e), errorHint(e));
    if (e instanceof ApiError && e.status === 401) openPanel("settings", $("api-key"));
  }
}

function setStatus(text) {
  $("turn-status").textContent = text;
}

// ---- settings ---------------------------------------------------------------------
function loadSettings() {
  try {
    const s = JSON.parse(localStorage.getItem(SETTINGS_STORAGE) || "{}");
    for (const [id, value] of Object.entries(s)) if ($(id)) $(id).value = value;
  } catch {
    // No storage, or a value from another version: the defaults stand.
  }
  $("api-key").value = apiKey();
}

function saveSettings() {
  const s = {};
  for (const id of ["temperature", "top-p", "max-tokens", "seed"]) s[id] = $(id).value;
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

function sampling(newSeed) {
  const seedText = $("seed").value.trim();
  const seed = newSeed || seedText === "" ? Math.floor(Math.random() * 2 ** 31) : parseInt(seedText, 10);
  return {
    temperature: number("temperature", 1),
    top_p: number("top-p", 1),
    max_output_tokens: Math.max(1, Math.round(number("max-tokens", 200))),
    seed,
  };
}

function figures(responseId) {
  try {
    return JSON.parse(localStorage.getItem(FIGURES_STORAGE) || "{}")[responseId] ?? {};
  } catch {
    return {};
  }
}

function keepFigures(responseId, f) {
  try {
    const all = JSON.parse(localStorage.getItem(FIGURES_STORAGE) || "{}");
    all[responseId] = f;
    const ids = Object.keys(all);
    for (const old of ids.slice(0, Math.max(0, ids.length - 500))) delete all[old];
    localStorage.setItem(FIGURES_STORAGE, JSON.stringify(all));
  } catch {
    // Not kept: the page measured them once.
  }
}

// ---- models -----------------------------------------------------------------------
function modelById(id) {
  return state.models.find((m) => m.id === id) ?? null;
}

function selectedModel() {
  return modelById(state.model ?? $("model").value) ?? state.models[0] ?? null;
}

function showModelInfo() {
  const m = selectedModel();
  const picker = $("model");
  picker.disabled = state.model !== null || state.models.length === 0;
  picker.title = state.model ? "Fixed by this conversation's first answer" : "";
  $("model-info").textContent = m
    ? `${m.attention ?? "?"} attention, order ${m.order ?? "?"} · state ${formatBytes(m.state_bytes_per_session)} per session` +
      (m.max_context ? ` · context ${m.max_context} tokens` : "")
    : "";
}

async function loadModels() {
  const list = await getJson("/v1/models");
  state.models = list.data ?? [];
  const picker = $("model");
  const before = picker.value;
  picker.replaceChildren(...state.models.map((m) => new Option(m.id, m.id)));
  if (modelById(before)) picker.value = before;
  if (state.model && modelById(state.model)) picker.value = state.model;
  showModelInfo();
}

// ---- conversations ----------------------------------------------------------------
function drawConversations() {
  renderConversations($("conversations"), state.conversations, state.current?.id ?? null, {
    open: (conv) => {
      closePanels();
      guard(openConversation(conv.id));
    },
    remove: (conv) => guard(removeConversation(conv)),
  });
  $("conversations-empty").hidden = state.conversations.length > 0;
}

async function loadConversations() {
  const list = await getJson("/v1/conversations");
  state.conversations = list.data ?? [];
  drawConversations();
}

function drawHeader() {
  const meta = state.current?.metadata ?? {};
  $("conversation-title").textContent = state.current ? meta.title || "Untitled" : "New conversation";
  $("conversation-note").textContent = !state.current
    ? "Your first message starts a conversation kept on the server."
    : meta.forked_from
      ? `A branch of ${titleOf(meta.forked_from)}, continuing from its state.`
      : "";
}

function titleOf(id) {
  const c = state.conversations.find((x) => x.id === id);
  return c ? `“${c.metadata?.title || "Untitled"}”` : "another conversation";
}

function drawMessages() {
  const list = $("messages");
  list.replaceChildren(...state.messages.map((m) => messageElement(m, actions)));
  refreshMessages();
  list.lastElementChild?.scrollIntoView({ block: "end" });
}

// Re-draws every message's status, figures and actions (which one is last changes).
function refreshMessages() {
  const model = selectedModel();
  const last = state.messages.findLast((m) => m.role === "assistant" && m.kept);
  for (const m of state.messages) updateMessage(m, actions, m === last, model);
}

function messageFromItem(item) {
  const text = (item.content ?? []).map((p) => p.text ?? "").join("");
  return {
    role: item.role,
    text,
    itemId: item.id,
    responseId: item.response_id ?? null,
    status: item.status ?? "completed",
    kept: true,
    stats: item.response_id ? { ...figures(item.response_id) } : {},
  };
}

function statsOf(response) {
  const u = response.usage ?? {};
  return {
    inputTokens: u.input_tokens,
    cachedTokens: u.input_tokens_details?.cached_tokens ?? 0,
    outputTokens: u.output_tokens,
    position: response.session?.position,
    stateBytes: response.session?.state_bytes,
  };
}

function newConversation() {
  stopTurn();
  state.current = null;
  state.model = null;
  state.messages = [];
  history.replaceState(null, "", location.pathname + location.search);
  showError("");
  drawHeader();
  drawMessages();
  drawConversations();
  showModelInfo();
  $("prompt").focus();
}

async function openConversation(id) {
  stopTurn();
  const seq = ++state.loadSeq;
  showError("");
  const [conv, items] = await Promise.all([
    getJson(`/v1/conversations/${encodeURIComponent(id)}`),
    conversationItems(id),
  ]);
  if (seq !== state.loadSeq) return;
  state.current = conv;
  state.model = null;
  state.messages = items.filter((i) => i.type === "message").map(messageFromItem);
  if (location.hash !== `#${id}`) history.replaceState(null, "", `#${id}`);
  if (!state.conversations.some((c) => c.id === id)) state.conversations.unshift(conv);
  drawHeader();
  drawMessages();
  drawConversations();
  showModelInfo();
  await loadResponses(seq);
}

// Each answer's stored response: its usage and state figures, and the conversation's
// model (fixed by its first response). A response that expired leaves its answer bare.
async function loadResponses(seq) {
  const answers = state.messages.filter((m) => m.responseId);
  const responses = await Promise.all(
    answers.map((m) => getJson(`/v1/responses/${encodeURIComponent(m.responseId)}`).catch(() => null)));
  if (seq !== state.loadSeq) return;
  answers.forEach((m, i) => {
    if (responses[i]) m.stats = { ...m.stats, ...statsOf(responses[i]) };
  });
  const model = responses.find((r) => r?.model)?.model;
  if (model) {
    state.model = model;
    if (modelById(model)) $("model").value = model;
  }
  showModelInfo();
  refreshMessages();
}

async function removeConversation(conv) {
  const title = conv.metadata?.title || conv.id;
  if (!confirm(`Delete “${title}” from the server?`)) return;
  await deleteJson(`/v1/conversations/${encodeURIComponent(conv.id)}`);
  state.conversations = state.conversations.filter((c) => c.id !== conv.id);
  if (state.current?.id === conv.id) newConversation();
  else drawConversations();
}

async function createConversation(title, extra = {}) {
  const conv = await postJson("/v1/conversations", { metadata: { title: title.slice(0, 80), ...extra } });
  state.conversations.unshift(conv);
  return conv;
}

// A branch of the open conversation at answer `msg`: the server forks the state, the page
// names the branch and opens it.
async function branchAt(msg) {
  const source = state.current;
  const fork = await postJson(`/v1/conversations/${encodeURIComponent(source.id)}/fork`, { item_id: msg.itemId });
  const title = `${(source.metadata?.title || "Untitled").replace(/ · branch( \d+)?$/, "")} · branch`;
  let conv = fork;
  try {
    conv = await postJson(`/v1/conversations/${encodeURIComponent(fork.id)}`, {
      metadata: { ...(fork.metadata ?? {}), title: title.slice(0, 80), forked_from: source.id },
    });
  } catch {
    // The branch exists; it keeps the source's title.
  }
  state.conversations.unshift(conv);
  await openConversation(conv.id);
  return conv;
}

async function forkAt(msg) {
  if (state.turn) return;
  await branchAt(msg);
  $("prompt").focus();
}

// The last user message answered again with a new seed, on a branch from the answer
// before it (or a new conversation when it was the first turn); the page shows the branch.
async function regenerate() {
  if (state.turn) return;
  const lastUser = state.messages.findLastIndex((m) => m.role === "user");
  if (lastUser < 0) return;
  const text = state.messages[lastUser].text;
  const before = state.messages.slice(0, lastUser).findLast((m) => m.role === "assistant" && m.kept && m.itemId);
  if (before) {
    await branchAt(before);
  } else {
    const model = state.model;
    const conv = await createConversation(state.current?.metadata?.title || text,
                                          state.current ? { forked_from: state.current.id } : {});
    state.current = conv;
    state.model = model;
    state.messages = [];
    history.replaceState(null, "", `#${conv.id}`);
    drawHeader();
    drawMessages();
    drawConversations();
  }
  await runTurn(text, true);
}

// ---- a turn -----------------------------------------------------------------------
function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  $("model").disabled = busy || state.model !== null;
}

function stopTurn() {
  state.turn?.controller.abort();
}

async function send() {
  const prompt = $("prompt");
  const text = prompt.value;
  if (state.turn || !text.trim()) return;
  showError("");
  if (!state.current) {
    state.current = await createConversation(text.trim().split("\n")[0] || "Untitled");
    history.replaceState(null, "", `#${state.current.id}`);
    drawHeader();
    drawConversations();
  }
  prompt.value = "";
  await runTurn(text, false);
}

// Streams one response in the open conversation; the user message and the answer are
// drawn at once and the answer grows with each delta.
async function runTurn(text, newSeed) {
  const model = selectedModel();
  if (!model) throw new ApiError(0, "No model is loaded (see the error above, or the API key).");
  const user = { role: "user", text, status: "streaming", kept: false, stats: {} };
  const answer = { role: "assistant", text: "", status: "streaming", kept: false, stats: {} };
  state.messages.push(user, answer);
  const list = $("messages");
  list.append(messageElement(user, actions), messageElement(answer, actions));
  refreshMessages();
  answer.dom.li.scrollIntoView({ block: "end" });
  const controller = new AbortController();
  state.turn = { controller, msg: answer };
  setBusy(true);
  setStatus("Sending…");
  const body = { model: model.id, conversation: state.current.id, input: text, ...sampling(newSeed) };
  try {
    const response = await streamTurn(body, answer, controller.signal);
    user.kept = answer.kept = true;
    user.status = "completed";
    answer.status = response.status === "incomplete" ? "incomplete" : "completed";
    answer.responseId = response.id;
    answer.stats = { ...answer.stats, ...statsOf(response) };
    keepFigures(response.id, { ttftMs: answer.stats.ttftMs, tokensPerSec: answer.stats.tokensPerSec });
    state.model = response.model ?? model.id;
    drawConversations();
    setStatus(`Done: ${answer.stats.outputTokens ?? "?"} tokens.`);
  } catch (e) {
    if (e?.name === "AbortError") {
      user.status = answer.status = "stopped";
      setStatus("Stopped.");
    } else {
      user.status = answer.status = "failed";
      answer.error = errorText(e);
      setStatus("");
      throw e;
    }
  } finally {
    state.turn = null;
    setBusy(false);
    refreshMessages();
    showModelInfo();
    if (document.activeElement === $("stop") || document.activeElement === document.body) $("prompt").focus();
  }
}

// The events of one response into `answer`; returns the final response object. A 409
// (the conversation's previous turn, e.g. one just stopped, has not ended yet) is tried
// again for a while.
async function streamTurn(body, answer, signal) {
  const start = performance.now();
  for (let wait = 200; ; wait = Math.min(wait * 2, 2000)) {
    try {
      return await readEvents(body, answer, signal, performance.now());
    } catch (e) {
      const busy = e instanceof ApiError && e.status === 409 && answer.text === "";
      if (!busy || performance.now() - start > BUSY_RETRY_MS) throw e;
      setStatus("The conversation's previous turn is still ending; trying again…");
      await new Promise((resolve, reject) => {
        const t = setTimeout(resolve, wait);
        signal.addEventListener("abort", () => {
          clearTimeout(t);
          reject(new DOMException("stopped", "AbortError"));
        }, { once: true });
      });
    }
  }
}

async function readEvents(body, answer, signal, sentAt) {
  let first = 0;
  let deltas = 0;
  // Deltas reach the DOM once per frame: a fast model writes thousands of tokens a second.
  let pending = "";
  let frame = 0;
  const flush = () => {
    frame = 0;
    if (!pending) return;
    const list = $("messages");
    const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 48;
    const node = answer.dom.text.lastChild;
    if (node?.nodeType === Node.TEXT_NODE) node.appendData(pending);
    else answer.dom.text.append(pending);
    pending = "";
    setStatus(`Writing… ${deltas} tokens`);
    if (atBottom) list.scrollTop = list.scrollHeight;
  };
  try {
    for await (const ev of streamEvents("/v1/responses", body, signal)) {
      switch (ev.type) {
        case "response.output_item.added":
          answer.itemId = ev.item?.id ?? answer.itemId;
          break;
        case "response.output_text.delta": {
          const now = performance.now();
          if (deltas === 0) {
            first = now;
            answer.stats.ttftMs = now - sentAt;
          }
          deltas++;
          answer.text += ev.delta ?? "";
          pending += ev.delta ?? "";
          if (!frame) frame = requestAnimationFrame(flush);
          break;
        }
        case "response.completed":
        case "response.incomplete": {
          // Tokens after the first over the time they took, as this page saw them: a
          // window shorter than MIN_TIMED_MS (the deltas arrived together) is not timed.
          const tokens = ev.response?.usage?.output_tokens ?? deltas;
          const span = performance.now() - first;
          if (deltas > 0 && tokens > 1 && span >= MIN_TIMED_MS) {
            answer.stats.tokensPerSec = ((tokens - 1) * 1000) / span;
          }
          return ev.response;
        }
        case "response.failed":
          throw new ApiError(500, ev.response?.error?.message ?? "The response failed.");
        case "error":
          throw new ApiError(500, ev.error?.message ?? ev.message ?? "The server reported an error.", ev.code);
        default:
          break;
      }
    }
  } finally {
    if (frame) cancelAnimationFrame(frame);
    flush();
  }
  throw new ApiError(0, "The server ended the stream before the response was complete.");
}

// ---- panels (narrow windows) ------------------------------------------------------
function openPanel(id, focus) {
  const panel = $(id);
  panel.classList.add("open");
  $(id === "sidebar" ? "toggle-conversations" : "toggle-settings").setAttribute("aria-expanded", "true");
  focus?.focus();
}

function closePanels() {
  for (const [panel, button] of [["sidebar", "toggle-conversations"], ["settings", "toggle-settings"]]) {
    $(panel).classList.remove("open");
    $(button).setAttribute("aria-expanded", "false");
  }
}

function togglePanel(id, button) {
  const open = !$(id).classList.contains("open");
  closePanels();
  if (open) openPanel(id, $(id === "sidebar" ? "new-conversation" : "temperature"));
  else button.focus();
  button.setAttribute("aria-expanded", String(open));
}

// ---- wiring -----------------------------------------------------------------------
async function reloadAll() {
  showError("");
  await loadModels();
  await loadConversations();
  const id = location.hash.slice(1);
  if (id && id !== state.current?.id) await openConversation(id);
}

function wire() {
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    guard(send());
  });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      guard(send());
    }
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      if (state.turn) {
        e.preventDefault();
        stopTurn();
      } else {
        closePanels();
      }
    }
  });
  $("stop").addEventListener("click", stopTurn);
  $("new-conversation").addEventListener("click", () => {
    closePanels();
    newConversation();
  });
  $("model").addEventListener("change", showModelInfo);
  for (const id of ["temperature", "top-p", "max-tokens", "seed"]) $(id).addEventListener("change", saveSettings);
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    setApiKey($("api-key").value.trim());
    guard(reloadAll());
  });
  for (const b of document.querySelectorAll("[data-close]")) b.addEventListener("click", closePanels);
  $("toggle-conversations").addEventListener("click", (e) => togglePanel("sidebar", e.currentTarget));
  $("toggle-settings").addEventListener("click", (e) => togglePanel("settings", e.currentTarget));
  window.addEventListener("hashchange", () => {
    const id = location.hash.slice(1);
    if (id && id !== state.current?.id) guard(openConversation(id));
  });
}

loadSettings();
wire();
drawHeader();
drawConversations();
document.body.dataset.ready = "loading";
guard(reloadAll()).finally(() => {
  document.body.dataset.ready = "true";
});
