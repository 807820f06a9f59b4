// One streamed response (POST /v1/responses, stream: true) drawn into an answer as it
// arrives, its text and its function calls, with the figures the page measures: time to
// first token and tokens/s.
import { ApiError, streamEvents } from "./api.js";
import { renderCalls } from "./view.js";

const BUSY_RETRY_MS = 15000;  // how long a turn retries a 409 (the previous turn ending)
const MIN_TIMED_MS = 50;  // the shortest decode the page reports tokens/s for

// `answer` is a message object (view.js) whose dom exists; `ui` = {setStatus(text),
// scroller (the element that scrolls the messages)}.
// The events of one response into `answer`; returns the final response object. A 409
// (the conversation's previous turn, e.g. one just stopped, has not ended yet) is tried
// again for a while.
export async function streamTurn(body, answer, signal, ui) {
  const start = performance.now();
  for (let wait = 200; ; wait = Math.min(wait * 2, 2000)) {
    try {
      return await readEvents(body, answer, signal, performance.now(), ui);
    } catch (e) {
      const busy = e instanceof ApiError && e.status === 409 && answer.text === "" && !answer.calls?.length;
      if (!busy || performance.now() - start > BUSY_RETRY_MS) throw e;
      ui.setStatus("The conversation's previous turn is still ending; trying again…");
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

async function readEvents(body, answer, signal, sentAt, ui) {
  let first = 0;
  let deltas = 0;
  // Deltas reach the DOM once per frame: a fast model writes thousands of tokens a second.
  let pending = "";
  let frame = 0;
  const flush = () => {
    frame = 0;
    if (!pending) return;
    const list = ui.scroller;
    const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 48;
    const node = answer.dom.text.lastChild;
    if (node?.nodeType === Node.TEXT_NODE) node.appendData(pending);
    else answer.dom.text.append(pending);
    pending = "";
    ui.setStatus(`Writing… ${deltas} tokens`);
    if (atBottom) list.scrollTop = list.scrollHeight;
  };
  const arrived = () => {
    const now = performance.now();
    if (deltas === 0) {
      first = now;
      answer.stats.ttftMs = now - sentAt;
    }
    deltas++;
  };
  // A function call's arguments as they arrive (the calls are few and short: drawn at once).
  const callOf = (itemId) => answer.calls?.find((c) => c.id === itemId);
  const drawCalls = () => {
    renderCalls(answer);
    ui.setStatus(`Writing a call… ${deltas} tokens`);
  };
  try {
    for await (const ev of streamEvents("/v1/responses", body, signal)) {
      switch (ev.type) {
        case "response.output_item.added":
          if (ev.item?.type === "function_call") {
            answer.calls = [...(answer.calls ?? []), { id: ev.item.id, name: ev.item.name, arguments: ev.item.arguments ?? "" }];
            drawCalls();
          } else {
            answer.itemId = ev.item?.id ?? answer.itemId;
          }
          break;
        case "response.function_call_arguments.delta": {
          const call = callOf(ev.item_id);
          if (!call) break;
          arrived();
          call.arguments += ev.delta ?? "";
          drawCalls();
          break;
        }
        case "response.function_call_arguments.done": {
          const call = callOf(ev.item_id);
          if (!call) break;
          call.arguments = ev.arguments ?? call.arguments;
          drawCalls();
          break;
        }
        case "response.output_text.delta": {
          arrived();
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
          // The calls as the response holds them (the same, unless an event was missed).
          const calls = (ev.response?.output ?? []).filter((i) => i.type === "function_call");
          if (calls.length) {
            answer.calls = calls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments ?? "" }));
            renderCalls(answer);
          }
          const message = (ev.response?.output ?? []).find((i) => i.type === "message");
          if (message?.id) answer.itemId = message.id;
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
