// The playground page: models, conversations kept on the server, streamed turns, stop,
// fork and regenerate. HTTP in api.js, list drawing in view.js; this file owns the state.
import { ApiError, setApiKey, getJson, postJson, deleteJson, conversationItems } from "./api.js";
import { formatBytes, messageElement, updateMessage, renderConversations } from "./view.js";
import { loadSettings, saveSettings, sampling, toolsRequest, toolsDeclared, figures, keepFigures, SETTING_IDS } from "./settings.js";
import { streamTurn } from "./turn.js";

const $ = (id) => document.getElementById(id);

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
    ? `${layerKinds(m) ?? `${m.attention ?? "?"} attention, order ${m.order ?? "?"} · state ${formatBytes(m.state_bytes_per_session)} per session`}` +
      (m.max_context ? ` · context ${m.max_context} tokens` : "")
    : "";
}

// A hybrid's layers by kind and its state at 1k tokens and at most (at max_context: its
// attention layers grow); null for a model of one kind of layer.
function layerKinds(m) {
  const kinds = m.state_bytes_by_mixer;
  if (!Array.isArray(kinds) || kinds.length < 2) return null;
  const names = kinds.map((k) => `${k.layers} ${k.mixer === "attention" ? `${m.attention} attention` : k.mixer}`);
  return `${names.join(" + ")} layers · state ${formatBytes(m.state_bytes_per_session_at_1k)} at 1k tokens, ` +
    `${formatBytes(m.state_bytes_per_session)} at most`;
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
  // A fork names its source (forked_from); a regenerated first turn is a new conversation
  // the page names in its metadata.
  const source = state.current?.forked_from?.conversation_id ?? meta.forked_from;
  $("conversation-title").textContent = state.current ? meta.title || "Untitled" : "New conversation";
  $("conversation-note").textContent = !state.current
    ? "Your first message starts a conversation kept on the server."
    : source
      ? `A branch of ${titleOf(source)}, continuing from its state.`
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
    serverTtftMs: response.timings?.time_to_first_token_ms ?? undefined,
    serverTokensPerSec: response.timings?.output_tokens_per_second ?? undefined,
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
  state.model = conv.model ?? null;  // fixed by its first response
  if (state.model && modelById(state.model)) $("model").value = state.model;
  state.messages = items.filter((i) => i.type === "message").map(messageFromItem);
  if (location.hash !== `#${id}`) history.replaceState(null, "", `#${id}`);
  if (!state.conversations.some((c) => c.id === id)) state.conversations.unshift(conv);
  drawHeader();
  drawMessages();
  drawConversations();
  showModelInfo();
  await loadResponses(seq);
}

// Each answer's stored response: its usage, timing and state figures. A response that
// expired leaves its answer bare.
async function loadResponses(seq) {
  const answers = state.messages.filter((m) => m.responseId);
  const responses = await Promise.all(
    answers.map((m) => getJson(`/v1/responses/${encodeURIComponent(m.responseId)}`).catch(() => null)));
  if (seq !== state.loadSeq) return;
  answers.forEach((m, i) => {
    if (responses[i]) m.stats = { ...m.stats, ...statsOf(responses[i]) };
  });
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
      metadata: { ...(fork.metadata ?? {}), title: title.slice(0, 80) },
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
  // A turn with tools is not added to a conversation (the page runs no tools, so a call
  // left unanswered would stay in every later turn's context): a first message sent with
  // tools starts none.
  if (!state.current && !toolsDeclared()) {
    state.current = await createConversation(text.trim().split("\n")[0] || "Untitled");
    history.replaceState(null, "", `#${state.current.id}`);
    drawHeader();
    drawConversations();
  }
  prompt.value = "";
  await runTurn(text, false);
}

// The request of one turn: in the open conversation, or, with tools, continuing from the
// conversation's last kept answer by previous_response_id, so the turn is not added to
// it (the page runs no tools: a call it cannot answer stays out of the conversation).
function turnBody(model, text, newSeed) {
  const body = { model: model.id, input: text, ...sampling(newSeed) };
  const tools = toolsRequest();
  if (!("tools" in tools)) return { ...body, conversation: state.current.id };
  const last = state.messages.findLast((m) => m.role === "assistant" && m.kept && m.responseId);
  return { ...body, ...tools, ...(last ? { previous_response_id: last.responseId } : {}) };
}

// Streams one response in the open conversation; the user message and the answer are
// drawn at once and the answer grows with each delta (its text and its function calls).
async function runTurn(text, newSeed) {
  const model = selectedModel();
  if (!model) throw new ApiError(0, "No model is loaded (see the error above, or the API key).");
  const body = turnBody(model, text, newSeed);
  const aside = !body.conversation;
  const user = { role: "user", text, status: "sent", kept: false, aside, stats: {} };
  const answer = { role: "assistant", text: "", status: "streaming", kept: false, aside, stats: {} };
  state.messages.push(user, answer);
  const list = $("messages");
  list.append(messageElement(user, actions), messageElement(answer, actions));
  refreshMessages();
  answer.dom.li.scrollIntoView({ block: "end" });
  const controller = new AbortController();
  state.turn = { controller, msg: answer };
  setBusy(true);
  setStatus("Sending…");
  try {
    const response = await streamTurn(body, answer, controller.signal, { setStatus, scroller: $("messages") });
    user.kept = answer.kept = !aside;
    user.status = "completed";
    answer.status = response.status === "incomplete" ? "incomplete" : "completed";
    answer.responseId = response.id;
    answer.stats = { ...answer.stats, ...statsOf(response) };
    keepFigures(response.id, { ttftMs: answer.stats.ttftMs, tokensPerSec: answer.stats.tokensPerSec });
    state.model = response.model ?? model.id;
    drawConversations();
    const calls = answer.calls?.length ? `, ${answer.calls.length} call${answer.calls.length > 1 ? "s" : ""}` : "";
    setStatus(`Done: ${answer.stats.outputTokens ?? "?"} tokens${calls}.`);
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
  for (const id of SETTING_IDS) $(id).addEventListener("change", saveSettings);
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
