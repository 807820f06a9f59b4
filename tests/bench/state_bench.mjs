// The state benchmark's driver (tests/bench/state_bench.sh starts the server and the
// store): one TURNS-turn chat against one attnserve_server, each turn a user message of
// WORDS English words and an answer of at most MAX_OUTPUT greedy tokens, streamed, as
//
//   chain         /v1/responses with store true and previous_response_id naming the
//                 previous turn's response (the chain ends at the first turn not served:
//                 there is no stored response to continue from);
//   conversation  POST /v1/conversations once, then /v1/responses with `conversation`
//                 (ends after two turns in a row not served).
//
// A turn is served when its HTTP status is 200 and its stream ends in response.completed
// or response.incomplete (max_output_tokens) with no `error` event: a 429 before the
// stream, or an error event inside a 200 stream (the turn ran, its state was not stored),
// is not. After each turn it reads what the server and the store hold:
//   - store bytes: `du -sb` of a dir: store; for Redis, MEMORY USAGE summed over every key
//     (and DBSIZE, and used_memory's growth since before the first turn, which includes
//     the allocator's slack); for the memory store nothing is measured
//     here (the server exports no gauge of its stored responses' bytes; the /metrics
//     families named *bytes* are recorded whole, so a gauge added later is seen);
//   - attnserve_snapshot_bytes_written_total (all stores summed): bytes the server wrote
//     to a durable store;
//   - the server's VmRSS and VmHWM (/proc/PID/status).
// First token: from sending the request to the first response.output_text.delta event,
// client side. Prints one JSON line per turn, then one with the model object of
// /v1/models.
//
// Usage: node state_bench.mjs --base=URL --model=NAME --api=chain|conversation --pid=PID
//        --metrics=URL [--store=memory|dir:PATH|redis://HOST:PORT] [--turns=20]
//        [--words=150] [--max_output=150]
import { execFileSync } from "node:child_process";
import fs from "node:fs";

const opt = Object.fromEntries(process.argv.slice(2).map((a) => {
  const m = a.match(/^--([a-z_]+)=(.*)$/s);
  if (!m) throw new Error(`state_bench.mjs: bad argument ${a}`);
  return [m[1], m[2]];
}));
const base = opt.base, model = opt.model, api = opt.api, pid = Number(opt.pid);
const store = opt.store ?? "memory";
const turns = Number(opt.turns ?? 20), words = Number(opt.words ?? 150);
const maxOutput = Number(opt.max_output ?? 150);
if (!["chain", "conversation"].includes(api)) throw new Error(`state_bench.mjs: --api=${api}`);

// Plain English prose, cut into messages of `words` words: each turn starts at a different
// sentence and takes every 7th after it (37 sentences, 7 prime to 37), so no two turns'
// messages are alike and the tokenizer sees ordinary text.
const SENTENCES = [
  "The harbour was quiet in the early morning, and the fishing boats rocked gently against the old stone wall.",
  "She had spent most of the winter repairing the roof of the barn, one slate at a time, whenever the rain stopped.",
  "A good loaf of bread needs little more than flour, water, salt and patience, but the patience is the hardest part.",
  "When the railway reached the valley, the village doubled in size within ten years and the market moved to the station square.",
  "Astronomers measure the distance to nearby stars by watching how their positions shift as the earth travels around the sun.",
  "The committee met every Thursday evening in the library, where the heating rarely worked and the tea was always too strong.",
  "He learned to sail on a small lake in the hills, and only later discovered how different the open sea could be.",
  "Most of the letters were written in a careful, slanting hand, and several of them mentioned a journey that never took place.",
  "Bees communicate the direction of flowers to one another through a dance whose angle follows the position of the sun.",
  "The bridge had been rebuilt three times since the flood, and each version was a little wider than the one before.",
  "In the spring the orchard filled with blossom, and the farmer's children were sent to chase the birds from the young fruit.",
  "Engineers testing the new engine found that it ran smoothly at low speed but shook badly whenever it was pushed too hard.",
  "The museum keeps a collection of clocks, some of which have not been wound for a century and still show the hour they stopped.",
  "Nobody in the family could remember who had planted the oak tree, although everyone agreed it was older than the house.",
  "A careful reader will notice that the second chapter contradicts the first on the date of the wedding.",
  "The river freezes only in the hardest winters, and when it does the whole town comes out to skate beneath the bridges.",
  "Her grandfather kept bees, grew leeks, and wrote long letters to the newspaper about the price of coal.",
  "The road over the pass is closed from November to April, so travellers must go the long way round by the coast.",
  "Chemists found that the colour of the glass depended less on the sand than on the small amount of metal added to it.",
  "The orchestra rehearsed the symphony for six weeks, and on the night of the concert the conductor lost his place twice.",
  "Walking along the cliff path at dusk, they watched the lighthouse begin to turn and the first ships head out to sea.",
  "The shop sold everything from nails and paint to fishing line, birthday cards and tins of peaches.",
  "Glaciers move so slowly that a stone dropped on the ice may take a hundred years to reach the valley below.",
  "The old map showed a road through the forest that no longer exists, and a mill where there is now only a meadow.",
  "After the harvest the village held a fair with music, games and a contest for the heaviest pumpkin.",
  "The teacher asked each pupil to describe a journey, real or imagined, in no more than a single page.",
  "Rain had been falling for three days, and the stream behind the cottage had risen almost to the garden gate.",
  "A clock that loses one second a day will be wrong by six minutes after a year, which is why sailors checked theirs against the stars.",
  "The letters arrived in a bundle tied with string, some stamped in cities the family had never visited.",
  "Owls hunt by sound as much as by sight, turning their heads to judge exactly where a mouse is moving in the grass.",
  "The new library was built of red brick, with tall windows facing north so that the light on the reading tables stayed even.",
  "He counted the steps from the gate to the door every night, and there were always forty one, except once.",
  "The cook insisted that the soup be stirred clockwise, although nobody ever found out why it mattered.",
  "Wind turbines on the ridge turned slowly through the summer and faster in the autumn storms.",
  "The painter worked only in the mornings, when the light from the sea was clear and cool and the colours stayed true.",
  "Merchants crossing the desert travelled at night and rested through the heat of the day in the shade of their tents.",
  "By the end of the week the carpenter had finished the table, and the whole family gathered round it for supper.",
];

function message(turn) {
  const out = [`Turn ${turn}.`];
  for (let k = 0; out.length < words; k++) {
    const s = SENTENCES[(turn * 11 + k * 7) % SENTENCES.length];
    out.push(...s.split(" "));
  }
  return out.slice(0, words).join(" ");
}

async function* events(response) {
  let buffer = "";
  const decoder = new TextDecoder();
  for await (const bytes of response.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split("\n").find((l) => l.startsWith("data: "));
      if (data && data !== "data: [DONE]") yield JSON.parse(data.slice(6));
    }
  }
}

// One streamed turn: { served, status, error, id, ttft_ms, total_ms, usage, deltas (text
// delta events: the answer's length when an error event took the place of the usage) }.
async function turnOnce(body) {
  const start = performance.now();
  const r = await fetch(`${base}/v1/responses`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const out = { status: r.status, served: false, error: null, id: null, ttft_ms: null, usage: null };
  if (r.status !== 200) {
    const text = await r.text();
    try { out.error = JSON.parse(text).error ?? text; } catch { out.error = text; }
    out.total_ms = performance.now() - start;
    return out;
  }
  let ended = false;
  for await (const e of events(r)) {
    if (e.type === "response.created") out.id = e.response.id;
    if (e.type === "response.output_text.delta") {
      if (out.ttft_ms === null) out.ttft_ms = performance.now() - start;
      out.deltas = (out.deltas ?? 0) + 1;
    }
    if (e.type === "error") out.error = { code: e.code, message: e.message, param: e.param };
    if (e.type === "response.completed" || e.type === "response.incomplete") {
      ended = true;
      out.usage = e.response.usage;
      out.response_status = e.response.status;
    }
    if (e.type === "response.failed") out.error = e.response?.error ?? e;
  }
  out.total_ms = performance.now() - start;
  out.served = ended && out.error === null;
  return out;
}

function rss() {
  try {
    const s = fs.readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = (k) => Number((s.match(new RegExp(`^${k}:\\s+(\\d+) kB`, "m")) ?? [0, NaN])[1]) * 1024;
    return { rss: kb("VmRSS"), hwm: kb("VmHWM") };
  } catch { return { rss: null, hwm: null }; }
}

// Every attnserve_* sample whose family name says bytes, summed over its labels.
async function byteMetrics() {
  const out = {};
  try {
    const text = await (await fetch(`${opt.metrics}/metrics`)).text();
    for (const line of text.split("\n")) {
      const m = line.match(/^(attnserve_[a-z_]*bytes[a-z_]*)(\{[^}]*\})?\s+(\S+)$/);
      if (m) out[m[1]] = (out[m[1]] ?? 0) + Number(m[3]);
    }
  } catch (e) { out.error = String(e); }
  return out;
}

let redisBase = null;
function storeBytes() {
  if (store.startsWith("dir:")) {
    return { store_bytes: Number(execFileSync("du", ["-sb", store.slice(4)], { encoding: "utf8" }).split("\t")[0]) };
  }
  if (store.startsWith("redis://")) {
    const [host, port] = store.slice(8).split("/")[0].split(":");
    const cli = (...a) => execFileSync("redis-cli", ["-h", host, "-p", port, ...a], { encoding: "utf8" });
    const used = Number(cli("info", "memory").match(/^used_memory:(\d+)/m)[1]);
    if (redisBase === null) redisBase = used;
    // MEMORY USAGE of every key (value, key and Redis' own overhead), summed by a script.
    const keysBytes = Number(cli("eval", "local t = 0 for _, k in ipairs(redis.call('keys', '*')) do " +
      "t = t + (redis.call('memory', 'usage', k, 'samples', '0') or 0) end return t", "0").trim());
    return { store_bytes: keysBytes, store_keys: Number(cli("dbsize").trim()),
             redis_used_memory_growth: used - redisBase };
  }
  return { store_bytes: null };
}

const print = (o) => console.log(JSON.stringify(o));
storeBytes();  // Redis: its used_memory before the first turn
const before = await byteMetrics();
print({ start: true, api, store, rss: rss(), metrics: before, ...storeBytes() });

let conversation = null;
if (api === "conversation") {
  const r = await fetch(`${base}/v1/conversations`, {
    method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
  const text = await r.text();
  if (r.status !== 200) {
    print({ turn: 0, served: false, status: r.status, error: text });
    process.exit(0);
  }
  conversation = JSON.parse(text).id;
}
let previous = null, failuresInARow = 0;
for (let turn = 1; turn <= turns; turn++) {
  const body = { model, input: message(turn), store: true, stream: true, temperature: 0,
                 max_output_tokens: maxOutput };
  if (conversation) body.conversation = conversation;
  if (api === "chain" && previous) body.previous_response_id = previous;
  let r;
  try {
    r = await turnOnce(body);
  } catch (e) {
    r = { served: false, status: "client", error: String(e) };
  }
  const row = { turn, api, store, ...r, rss: rss(), metrics: await byteMetrics(), ...storeBytes() };
  print(row);
  if (r.served) {
    previous = r.id;
    failuresInARow = 0;
  } else if (api === "chain" || ++failuresInARow >= 2) {
    break;
  }
}
const models = await (await fetch(`${base}/v1/models`)).json();
print({ model: models.data.find((m) => m.id === model) ?? models.data[0] });
