// DOM for the page's lists: messages (with their per-turn figures and actions) and
// conversations. Owns no state: app.js passes the message objects and the callbacks.
//
// A message object: {role, text, calls, itemId, responseId, status, kept, aside, stats,
// dom}, where calls (an answer's function calls, when any) is [{id, name, arguments (the
// text as written)}], aside says a turn sent with tools (not added to the conversation), and
// status is "sent" (a user message in flight), "streaming", "completed", "incomplete",
// "stopped" or "failed"; kept says the server holds it (false until its turn completes,
// and for a stopped or failed turn); stats is {ttftMs, tokensPerSec (the page's),
// serverTtftMs, serverTokensPerSec (the response's timings), inputTokens, cachedTokens,
// outputTokens, position, stateBytes} (any may be missing); dom is filled
// here.

export function formatBytes(n) {
  if (!Number.isFinite(n)) return "?";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < units.length - 1) {
    n /= 1000;
    i++;
  }
  return `${i === 0 ? n : n.toFixed(n >= 100 ? 0 : n >= 10 ? 1 : 2)} ${units[i]}`;
}

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

const ROLE_NAMES = { user: "You", assistant: "Model", system: "System" };

// A new <li> for `msg`; `actions` = {fork(msg), regenerate(msg)}.
export function messageElement(msg, actions) {
  const li = el("li", `message message-${msg.role}`);
  if (msg.role === "assistant") li.dataset.testid = "message-assistant";
  const head = el("div", "message-head");
  head.append(el("span", "message-role", ROLE_NAMES[msg.role] ?? msg.role));
  const badge = el("span", "badge");
  head.append(badge);
  const text = el("div", "message-text");
  text.dataset.testid = "message-text";
  const calls = el("div", "tool-calls");
  const note = el("p", "message-note small");
  const stats = el("div", "turn-stats small");
  const buttons = el("div", "message-actions");
  li.append(head, text, calls, note, stats, buttons);
  msg.dom = { li, badge, text, calls, note, stats, buttons };
  updateMessage(msg, actions, false);
  return li;
}

// Re-draws `msg` (text, status, figures, actions); `isLast`: the last assistant answer
// shown, which alone offers regenerate. `model` (from /v1/models) sizes the KV cache.
export function updateMessage(msg, actions, isLast, model = null) {
  const d = msg.dom;
  if (!d) return;
  d.text.textContent = msg.text;
  renderCalls(msg);
  d.li.classList.toggle("streaming", msg.status === "streaming");
  d.li.classList.toggle("aside", Boolean(msg.aside));
  d.li.classList.toggle("not-kept", msg.status === "stopped" || msg.status === "failed");
  d.li.setAttribute("aria-busy", msg.status === "streaming" ? "true" : "false");
  d.badge.textContent = {
    streaming: "writing…",
    incomplete: "cut at max tokens",
    stopped: "stopped",
    failed: "failed",
  }[msg.status] ?? "";
  d.badge.hidden = !d.badge.textContent;
  d.note.textContent =
    msg.status === "stopped" && msg.role === "assistant"
      ? "Stopped: this turn is not kept in the conversation (the server went back to before it)."
      : msg.status === "failed" && msg.role === "assistant" ? (msg.error ?? "")
      : msg.aside && msg.role === "assistant" && msg.status !== "streaming"
        ? "Sent with tools: it continued from the conversation's last answer and is not added to the conversation."
        : "";
  d.note.hidden = !d.note.textContent;
  if (msg.role === "assistant") {
    renderStats(d.stats, msg, model);
    renderActions(d.buttons, msg, actions, isLast);
  }
}

// An answer's function calls: each its name and its arguments, pretty-printed once they
// parse as JSON (while they stream, as written so far).
export function renderCalls(msg) {
  const box = msg.dom?.calls;
  if (!box) return;
  const calls = msg.calls ?? [];
  box.hidden = calls.length === 0;
  while (box.childElementCount > calls.length) box.lastElementChild.remove();
  calls.forEach((call, i) => {
    let node = box.children[i];
    if (!node) {
      node = el("div", "tool-call");
      node.dataset.testid = "tool-call";
      const name = el("div", "tool-call-head");
      name.append(el("span", "tool-call-label muted small", "calls "), el("code", "tool-call-name"));
      name.lastChild.dataset.testid = "tool-call-name";
      const args = el("pre", "tool-call-arguments");
      args.dataset.testid = "tool-call-arguments";
      node.append(name, args);
      box.append(node);
    }
    node.dataset.name = call.name ?? "";
    node.querySelector(".tool-call-name").textContent = call.name ?? "";
    node.querySelector(".tool-call-arguments").textContent = prettyArguments(call.arguments ?? "");
  });
}

function prettyArguments(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function renderActions(box, msg, actions, isLast) {
  box.replaceChildren();
  if (!msg.kept || !msg.itemId || !msg.responseId) return;
  const fork = el("button", "link-button", "Fork here");
  fork.type = "button";
  fork.dataset.testid = "fork";
  fork.title = "A new conversation that continues from this answer's state (nothing is re-sent)";
  fork.addEventListener("click", () => actions.fork(msg));
  box.append(fork);
  if (isLast) {
    const again = el("button", "link-button", "Regenerate");
    again.type = "button";
    again.dataset.testid = "regenerate";
    again.title = "Answer the last message again, with a new seed, on a new branch";
    again.addEventListener("click", () => actions.regenerate(msg));
    box.append(again);
  }
}

function figure(label, value, title) {
  const span = el("span", "figure");
  span.append(el("span", "figure-label", label), " ", el("strong", "", value));
  if (title) span.title = title;
  return span;
}

function renderStats(box, msg, model) {
  box.replaceChildren();
  const s = msg.stats ?? {};
  const row = el("div", "figures");
  if (s.ttftMs !== undefined) {
    row.append(figure("first token", `${Math.round(s.ttftMs)} ms`, "Time to first token, measured by this page"));
  } else if (s.serverTtftMs !== undefined) {
    row.append(figure("first token", `${Math.round(s.serverTtftMs)} ms`,
                      "Time to first token, measured by the server (queueing and prefill)"));
  }
  if (s.tokensPerSec !== undefined) {
    row.append(figure("speed", `${s.tokensPerSec.toFixed(0)} tokens/s`,
                      "Generated tokens per second after the first, as this page received them"));
  } else if (s.ttftMs === undefined && s.serverTokensPerSec !== undefined) {
    row.append(figure("speed", `${s.serverTokensPerSec.toFixed(0)} tokens/s`,
                      "Generated tokens per second after the first, measured by the server"));
  } else if (s.ttftMs !== undefined && msg.status !== "streaming") {
    row.append(figure("speed", "too fast to time", "The answer's tokens reached the page together"));
  }
  if (s.outputTokens !== undefined) row.append(figure("generated", `${s.outputTokens} tokens`));
  if (s.inputTokens !== undefined) {
    row.append(figure("prompt", `${s.inputTokens} tokens`, "Prompt tokens of this turn: the conversation so far and the new message"));
    row.append(figure("from checkpoint", `${s.cachedTokens ?? 0}`,
                      "Prompt tokens already in the stored state this turn continued from, not computed again (usage.input_tokens_details.cached_tokens)"));
  }
  if (row.childElementCount) box.append(row);
  if (s.stateBytes !== undefined && s.position !== undefined) box.append(memoryBars(s, model));
}

// The session's state beside a softmax KV cache of the same shape at this length.
function memoryBars(s, model) {
  const perToken = model?.kv_cache_bytes_per_token;
  const kv = Number.isFinite(perToken) ? s.position * perToken : NaN;
  const wrap = el("div", "memory");
  wrap.setAttribute("role", "group");
  wrap.setAttribute("aria-label", "Memory for this conversation");
  const max = Math.max(s.stateBytes, Number.isFinite(kv) ? kv : 0) || 1;
  const bar = (label, bytes, cls) => {
    const line = el("div", `memory-row ${cls}`);
    const track = el("div", "memory-track");
    const fill = el("div", "memory-fill");
    fill.style.width = `${Math.max(1, (100 * bytes) / max).toFixed(1)}%`;
    track.append(fill);
    line.append(el("span", "memory-label", label), track, el("span", "memory-value", formatBytes(bytes)));
    return line;
  };
  wrap.append(bar(`attnserve state at ${s.position} tokens`, s.stateBytes, "state"));
  // Layers whose state grows with the context (a KV cache): every layer of a softmax
  // model, a hybrid's attention layers, none of a fixed-state model's.
  const kinds = model?.state_bytes_by_mixer;
  const growing = Array.isArray(kinds)
    ? kinds.filter((k) => k.bytes_at_32k > k.bytes_at_1k).reduce((n, k) => n + k.layers, 0) : 0;
  const layers = Array.isArray(kinds) ? kinds.reduce((n, k) => n + k.layers, 0) : 0;
  if (Number.isFinite(kv)) {
    wrap.append(bar(`softmax KV cache at ${s.position} tokens`, kv, "kv"));
    const ratio = kv / s.stateBytes;
    // From /v1/models: where a session of this model starts to hold less than every
    // layer's KV cache (for a fixed state, the state's size over a token's KV bytes).
    const even = model?.break_even_context > 0 ? model.break_even_context : Math.ceil(s.stateBytes / perToken);
    let note;
    if (growing > 0 && growing === layers) {
      note = "The state is a KV cache: it grows with every token.";
    } else if (growing > 0) {
      note = ratio >= 1
        ? `The KV cache would be ${ratio.toFixed(1)}× the state and grows faster: the state grows only in its ${growing} attention layers of ${layers}.`
        : `The KV cache would pass the state at ${even} tokens: the state grows only in its ${growing} attention layers of ${layers}.`;
    } else {
      note = ratio >= 1
        ? `The KV cache would be ${ratio.toFixed(1)}× the state, and keeps growing; the state does not.`
        : `The KV cache would pass the state's fixed size at ${even} tokens.`;
    }
    const p = el("p", "memory-note small muted", note);
    p.dataset.testid = "memory-note";
    wrap.append(p);
  }
  // A hybrid: which layers hold what (its attention layers grow, its recurrent ones don't).
  if (Array.isArray(kinds) && kinds.length > 1) {
    const parts = kinds.map((k) => k.mixer === "attention"
      ? `${k.layers} attention layers ${formatBytes(k.bytes_at_1k)} at 1k tokens, ${formatBytes(k.bytes_at_32k)} at 32k`
      : `${k.layers} ${k.mixer} layers ${formatBytes(k.bytes_at_1k)} at any length`);
    const note = el("p", "memory-note small muted", `State by layer kind: ${parts.join("; ")}.`);
    note.dataset.testid = "state-by-mixer";
    wrap.append(note);
  }
  return wrap;
}

// The conversation list; `handlers` = {open(conv), remove(conv)}.
export function renderConversations(list, conversations, currentId, handlers) {
  list.replaceChildren();
  for (const conv of conversations) {
    const li = el("li", "conversation-entry");
    const open = el("button", "conversation-open");
    open.type = "button";
    open.dataset.testid = "conversation";
    open.dataset.id = conv.id;
    if (conv.id === currentId) open.setAttribute("aria-current", "true");
    const title = el("span", "conversation-title", conv.metadata?.title || "Untitled");
    const when = el("span", "conversation-meta small muted",
      `${conv.metadata?.forked_from ? "branch · " : ""}${new Date(conv.created_at * 1000).toLocaleString()}`);
    open.append(title, when);
    open.addEventListener("click", () => handlers.open(conv));
    const del = el("button", "conversation-delete", "×");
    del.type = "button";
    del.setAttribute("aria-label", `Delete conversation ${conv.metadata?.title || conv.id}`);
    del.title = "Delete";
    del.addEventListener("click", () => handlers.remove(conv));
    li.append(open, del);
    list.append(li);
  }
}
