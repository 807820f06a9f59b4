// The playground page (client/web/, served by attnserve_server at /) in Debian's chromium,
// driven by playwright-core (npm, tests/browser/package.json) through the page's
// data-testid hooks, the way a person uses it. tests/browser/page_test.sh starts the
// servers and runs:
//
//   node page_check.mjs BASE_A BASE_B BASE_KEYS KEY OUT_DIR [HYBRID]
//
// BASE_A and BASE_B: two replicas sharing one redis-server; BASE_KEYS: a server with
// --api_keys_file where KEY is valid; OUT_DIR: where the screenshots go; HYBRID: a hybrid
// model BASE_KEYS also serves (Mamba-2 or short-conv layers beside attention layers),
// whose layers and state the page must describe as such. Every wait is for
// a condition (generous timeouts), never for a time: a turn is kept streaming by a large
// max tokens and ended by the page's stop.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import path from "node:path";

const [baseA, baseB, baseKeys, key, outDir, hybrid] = process.argv.slice(2);
if (!outDir) {
  console.error("usage: node page_check.mjs BASE_A BASE_B BASE_KEYS KEY OUT_DIR");
  process.exit(2);
}
const TURN_MS = 180_000;  // a whole short turn on a loaded machine
const LONG_TOKENS = "60000";  // a turn that streams until it is stopped
const SHORT_TOKENS = "24";

let step = "start";
function log(what) {
  console.log(`page_check: ${what}`);
}
function fail(what) {
  console.error(`page_check: FAIL in "${step}": ${what}`);
  process.exit(1);
}
function expect(cond, what) {
  if (!cond) fail(what);
}

// Console errors and uncaught exceptions of every page; `allowed` lists the texts a check
// expects (a refused request logs "Failed to load resource" with its status).
const problems = [];
function watch(page, name, allowed = []) {
  page.on("console", (m) => {
    if (m.type() === "error" && !allowed.some((a) => m.text().includes(a))) {
      problems.push(`${name}: console error: ${m.text()}`);
    }
  });
  page.on("pageerror", (e) => problems.push(`${name}: uncaught: ${e.message}`));
}
function expectNoProblems() {
  expect(problems.length === 0, problems.join("\n"));
}

async function open(context, url, name, allowed) {
  const page = await context.newPage();
  watch(page, name, allowed);
  await page.goto(url);
  await page.waitForSelector("body[data-ready=true]", { timeout: 60_000 });
  return page;
}

const answers = (page) => page.getByTestId("message-assistant");
async function answerTexts(page) {
  return answers(page).locator("[data-testid=message-text]").allTextContents();
}
async function lastAnswerLength(page) {
  return page.evaluate(() => {
    const all = document.querySelectorAll("[data-testid=message-assistant] [data-testid=message-text]");
    return all.length ? all[all.length - 1].textContent.length : -1;
  });
}
async function pageError(page) {
  return (await page.locator("#error").isVisible()) ? await page.locator("#error").innerText() : "";
}
// Until no turn streams (send enabled again); fails with the page's error if it shows one.
async function turnEnded(page) {
  await page.waitForFunction(() => !document.querySelector("[data-testid=send]").disabled &&
                             !document.querySelector(".message.streaming"), null, { timeout: TURN_MS });
}
// One turn of `text` sent with Enter, waited for; returns the new answer's text.
async function turn(page, text, maxTokens = SHORT_TOKENS) {
  const before = await answers(page).count();
  await page.locator("#max-tokens").fill(maxTokens);
  await page.getByTestId("prompt").fill(text);
  await page.getByTestId("prompt").press("Enter");
  await page.waitForFunction((n) => document.querySelectorAll("[data-testid=message-assistant]").length > n,
                             before, { timeout: TURN_MS });
  await turnEnded(page);
  const err = await pageError(page);
  expect(!err, `the turn "${text}" showed an error: ${err}`);
  const last = answers(page).last();
  expect(!(await last.evaluate((e) => e.classList.contains("not-kept"))), `the answer to "${text}" is not kept`);
  return last.locator("[data-testid=message-text]").textContent();
}
// Sends a long turn, sees its answer grow at least `growths` times (sampled until it
// does), then stops it with `stop` (a click or a key); returns the lengths seen.
async function streamAndStop(page, text, growths, stop) {
  await page.locator("#max-tokens").fill(LONG_TOKENS);
  await page.getByTestId("prompt").fill(text);
  const before = await answers(page).count();
  await page.getByTestId("send").click();
  await page.waitForFunction((n) => document.querySelectorAll("[data-testid=message-assistant]").length > n,
                             before, { timeout: TURN_MS });
  const lengths = [];
  let seen = 0;
  while (lengths.length < growths) {
    await page.waitForFunction(
      (n) => {
        const all = document.querySelectorAll("[data-testid=message-assistant] [data-testid=message-text]");
        return all[all.length - 1].textContent.length > n || !document.querySelector(".message.streaming");
      },
      seen, { timeout: TURN_MS, polling: 10 });
    const streaming = await page.locator(".message.streaming").count();
    expect(streaming > 0, `the answer stopped streaming by itself after ${lengths.join(", ")} characters: ` +
           `${await pageError(page)} (status: ${await page.locator("#turn-status").textContent()})`);
    seen = await lastAnswerLength(page);
    lengths.push(seen);
    expect(await page.getByTestId("stop").isEnabled(), "stop is not enabled while the answer streams");
  }
  await stop();
  await turnEnded(page);
  const last = answers(page).last();
  const badge = await last.locator(".badge").textContent();
  expect(badge === "stopped", `the stopped answer's badge is "${badge}"`);
  expect(await page.getByTestId("stop").isDisabled(), "stop is still enabled after stopping");
  expect((await lastAnswerLength(page)) >= seen, "the stopped answer lost text");
  return lengths;
}

async function api(base, method, route, body, apiKey) {
  const headers = { "content-type": "application/json" };
  if (apiKey) headers.authorization = `Bearer ${apiKey}`;
  const res = await fetch(`${base}${route}`, { method, headers, body: body && JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
}
async function items(base, conv) {
  const r = await api(base, "GET", `/v1/conversations/${conv}/items?order=asc&limit=100`);
  expect(r.status === 200, `items of ${conv}: ${r.status} ${JSON.stringify(r.json)}`);
  return r.json.data.map((i) => ({ id: i.id, role: i.role, text: i.content.map((c) => c.text).join("") }));
}
const convOf = (page) => new URL(page.url()).hash.slice(1);

async function main() {
  mkdirSync(outDir, { recursive: true });
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", headless: true });
  try {
    const laptop = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    // 409 while a stopped turn is still ending on the server: the page tries again.
    const busy = ["status of 409"];

    step = "the page loads";
    let a = await open(laptop, `${baseA}/`, "A", busy);
    const models = await a.getByTestId("model").locator("option").allTextContents();
    expect(models.length > 0, "the model picker is empty");
    const info = await a.locator("#model-info").textContent();
    expect(/attention, order \d+ · state [\d.]+ [KMG]?B per session/.test(info), `model info "${info}"`);
    expectNoProblems();
    log(`loaded: models ${models.join(", ")} (${info})`);

    step = "keyboard: Shift+Enter is a new line";
    await a.getByTestId("prompt").click();
    await a.keyboard.type("one");
    await a.keyboard.press("Shift+Enter");
    await a.keyboard.type("two");
    expect((await a.getByTestId("prompt").inputValue()) === "one\ntwo", "Shift+Enter did not add a line");
    expect((await answers(a).count()) === 0, "Shift+Enter sent");

    step = "a message streams; stop ends it";
    const grew = await streamAndStop(a, "In the beginning", 4, () => a.getByTestId("stop").click());
    const conv = convOf(a);
    expect(conv.startsWith("conv_"), `the page's URL names no conversation: ${a.url()}`);
    expect((await items(baseA, conv)).length === 0, "the stopped turn is kept in the conversation");
    log(`streamed: the answer grew ${grew.join(" -> ")} characters, then stop ended it (not kept)`);

    step = "two turns";
    const first = await turn(a, "And God said");
    const second = await turn(a, "Let there be light");
    const figures = (await answers(a).last().locator(".turn-stats").innerText()).replace(/\s*\n\s*/g, " | ");
    for (const f of ["first token", "speed", "from checkpoint", "state at", "softmax KV cache at"]) {
      expect(figures.includes(f), `the answer's figures lack "${f}": ${figures}`);
    }
    const cached = Number(/from checkpoint (\d+)/.exec(figures)?.[1]);
    expect(cached > 0, `the second turn's cached tokens: ${figures}`);
    // The figures are the stored response's: cached tokens and the state's length.
    const lastItem = (await api(baseA, "GET", `/v1/conversations/${conv}/items?order=desc&limit=1`)).json.data[0];
    const stored = (await api(baseA, "GET", `/v1/responses/${lastItem.response_id}`)).json;
    expect(cached === stored.usage.input_tokens_details.cached_tokens,
           `the page shows ${cached} cached tokens, the response says ${JSON.stringify(stored.usage)}`);
    const at = `at ${stored.session.position} tokens`;
    expect(figures.includes(`state ${at}`) && figures.includes(`KV cache ${at}`),
           `the figures do not give the session's position ${stored.session.position}: ${figures}`);
    expectNoProblems();
    log(`two turns: "${first}" / "${second}"; the second turn's figures: ${figures}`);

    step = "a reload lists the conversation with its messages";
    await a.reload();
    await a.waitForSelector("body[data-ready=true]");
    await a.waitForFunction(() => document.querySelectorAll("[data-testid=message-assistant]").length === 2,
                            null, { timeout: 30_000 });
    expect(JSON.stringify(await answerTexts(a)) === JSON.stringify([first, second]),
           `after the reload: ${JSON.stringify(await answerTexts(a))}`);
    expect(await a.locator(`[data-testid=conversation][data-id="${conv}"]`).count() === 1, "not listed after a reload");
    await a.locator(".turn-stats", { hasText: "softmax KV cache" }).first().waitFor({ timeout: 30_000 });
    log("reloaded: the conversation is listed with both answers and their figures");

    step = "the other replica shows the conversation and continues it";
    let b = await open(laptop, `${baseB}/#${conv}`, "B", busy);
    await b.waitForFunction(() => document.querySelectorAll("[data-testid=message-assistant]").length === 2,
                            null, { timeout: 30_000 });
    expect(JSON.stringify(await answerTexts(b)) === JSON.stringify([first, second]),
           `on replica B: ${JSON.stringify(await answerTexts(b))}`);
    // B's origin has none of the page's own figures: the first token is the server's.
    const serverFigure = answers(b).first().locator(".figure", { hasText: "first token" });
    await serverFigure.waitFor({ timeout: 30_000 });
    const serverTitle = await serverFigure.getAttribute("title");
    expect(/measured by the server/.test(serverTitle), `replica B's first-token figure: ${serverTitle}`);
    const stoppedB = await streamAndStop(b, "And the earth", 2, () => b.keyboard.press("Escape"));
    log(`replica B: Escape stopped a streaming answer at ${stoppedB.at(-1)} characters`);
    const third = await turn(b, "And the evening and the morning");
    const onServer = await items(baseA, conv);
    expect(onServer.length === 6 && onServer[5].text === third,
           `replica A's items after B's turn: ${JSON.stringify(onServer)}`);
    log(`replica B continued: "${third}"; replica A lists 6 items`);

    step = "fork at the first answer: a branch that continues differently";
    await a.reload();
    await a.waitForFunction(() => document.querySelectorAll("[data-testid=message-assistant]").length === 3,
                            null, { timeout: 30_000 });
    const original = await items(baseA, conv);
    expect((await a.getByTestId("fork").count()) === 3, "not one fork button per answer");
    await a.getByTestId("fork").first().click();
    await a.waitForFunction((c) => location.hash.length > 1 && location.hash !== `#${c}`, conv, { timeout: 30_000 });
    const branch = convOf(a);
    await a.waitForFunction(() => document.querySelectorAll("[data-testid=message-assistant]").length === 1,
                            null, { timeout: 30_000 });
    expect(JSON.stringify(await answerTexts(a)) === JSON.stringify([first]), `the branch shows ${await answerTexts(a)}`);
    // The server's forked_from names the source, which the page shows.
    const note = await a.locator("#conversation-note").textContent();
    expect(/^A branch of /.test(note) && !/another conversation/.test(note), `the branch's note: "${note}"`);
    const branched = await turn(a, "Let there be light", "60");
    const branchItems = await items(baseA, branch);
    expect(branchItems.length === 4 && branchItems[1].text === first && branchItems[2].text === "Let there be light",
           `the branch's items: ${JSON.stringify(branchItems)}`);
    expect(branched !== second, `the branch continued exactly as the original did: "${branched}"`);
    expect(JSON.stringify(await items(baseA, conv)) === JSON.stringify(original), "the original changed");
    await a.locator(`[data-testid=conversation][data-id="${branch}"]`).waitFor({ timeout: 30_000 });
    log(`fork: the branch answered "${branched}" where the original answered "${second}"; the original is unchanged`);

    step = "regenerate: the last message answered again on a new branch";
    await a.getByTestId("regenerate").click();
    await a.waitForFunction((c) => location.hash !== `#${c}` &&
                            document.querySelectorAll("[data-testid=message-assistant]").length === 2,
                            branch, { timeout: 30_000 });
    await turnEnded(a);
    const regenerated = convOf(a);
    const regenItems = await items(baseA, regenerated);
    expect(regenItems.length === 4 && regenItems[2].text === "Let there be light" && regenItems[3].text !== branched,
           `the regenerated branch: ${JSON.stringify(regenItems)}`);
    expect((await items(baseA, branch)).length === 4, "regenerate changed the branch it started from");
    expectNoProblems();
    log(`regenerate: "${regenItems[3].text}" on a new branch`);

    step = "screenshots";
    await a.reload();
    await a.waitForSelector("body[data-ready=true]");
    await a.locator(".turn-stats", { hasText: "softmax KV cache" }).last().waitFor({ timeout: 30_000 });
    await a.getByTestId("prompt").focus();
    const shot = path.join(outDir, "playground.png");
    await a.screenshot({ path: shot });
    await a.setViewportSize({ width: 390, height: 844 });
    const overflow = await a.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow <= 0, `the phone-sized page scrolls sideways by ${overflow}px`);
    await a.getByRole("button", { name: "Conversations" }).click();
    expect(await a.getByTestId("conversation").first().isVisible(), "the conversation list does not open on a phone");
    await a.keyboard.press("Escape");
    const phone = path.join(outDir, "playground-phone.png");
    await a.screenshot({ path: phone });
    log(`screenshots: ${shot} ${phone}`);
    expectNoProblems();
    await laptop.close();

    step = "an invalid key shows the server's message";
    const keyed = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    await keyed.addInitScript(() => {
      if (!sessionStorage.getItem("seeded")) {
        localStorage.setItem("attnserve.apiKey", "not-a-key");
        sessionStorage.setItem("seeded", "1");
      }
    });
    // 400: the schema the server refuses, below.
    const k = await open(keyed, `${baseKeys}/`, "keys", ["status of 401", "status of 400"]);
    const refused = await api(baseKeys, "GET", "/v1/models", undefined, "not-a-key");
    expect(refused.status === 401 && refused.json.error?.message, `the server's refusal: ${JSON.stringify(refused)}`);
    await k.locator("#error").waitFor({ timeout: 30_000 });
    const shown = await k.locator("#error .error-message").textContent();
    expect(shown === refused.json.error.message, `the page shows "${shown}", the server said "${refused.json.error.message}"`);
    log(`invalid key: the page shows "${shown}"`);
    await k.locator("#api-key").fill(key);
    await k.locator("#api-key").press("Enter");
    await k.waitForFunction(() => document.querySelector("#error").hidden &&
                            document.querySelectorAll("[data-testid=model] option").length > 0, null, { timeout: 30_000 });
    await turn(k, "In the beginning", "8");
    await k.reload();
    await k.waitForSelector("body[data-ready=true]");
    expect((await k.locator("#api-key").inputValue()) === key, "the key is not kept across a reload");
    expect(await k.getByTestId("conversation").count() === 1, "the keyed tenant's conversation is not listed");
    log("a valid key: kept in the browser, the chat works, the tenant's conversation is listed");
    expectNoProblems();

    step = "a JSON Schema constrains the answer; one the server cannot enforce shows its refusal";
    const schema = {
      type: "object",
      properties: { tribe: { enum: ["Judah", "Levi"] }, count: { type: "integer" }, ok: { type: "boolean" } },
      required: ["tribe", "count", "ok"],
      additionalProperties: false,
    };
    await k.getByTestId("json-schema").fill("{\"type\": ");
    expect((await k.getByTestId("json-schema").getAttribute("aria-invalid")) === "true",
           "text that is not JSON is not marked invalid");
    await k.getByTestId("json-schema").fill(JSON.stringify(schema, null, 2));
    // The longest text this grammar allows (bounded whitespace, 16 digits) is under 400 bytes.
    const json = await turn(k, "Count the tribes", "400");
    let value;
    try {
      value = JSON.parse(json);
    } catch (e) {
      fail(`the answer under the schema is not JSON: ${JSON.stringify(json)}`);
    }
    expect(["Judah", "Levi"].includes(value.tribe) && Number.isInteger(value.count) &&
           typeof value.ok === "boolean" && Object.keys(value).length === 3,
           `the answer does not follow the schema: ${json}`);
    await k.getByTestId("json-schema").fill(JSON.stringify({ type: "integer", multipleOf: 3 }));
    await k.getByTestId("prompt").fill("Count them again");
    await k.getByTestId("prompt").press("Enter");
    await k.locator("#error").waitFor({ timeout: 30_000 });
    const refusal = await k.locator("#error .error-message").textContent();
    expect(refusal.includes("multipleOf"), `the refusal shown: "${refusal}"`);
    await turnEnded(k);
    await k.getByTestId("json-schema").fill("");
    log(`a JSON Schema: the answer ${JSON.stringify(value)}; refused: "${refusal}"`);
    expectNoProblems();

    step = "tools: the answer's function call is shown; a tool the server refuses shows its message";
    const toolsStart = Date.now();
    const convK = convOf(k);
    const itemsK = async () => (await api(baseKeys, "GET", `/v1/conversations/${convK}/items?limit=100`, undefined, key)).json.data.length;
    const itemsBefore = await itemsK();
    await k.getByTestId("tools").fill("[{\"type\": ");
    expect((await k.getByTestId("tools").getAttribute("aria-invalid")) === "true", "tools text that is not JSON is not marked invalid");
    // The city is a string from an enum: a small model's free string would run to max tokens.
    const weather = {
      type: "function", name: "get_weather", description: "The weather in a city",
      parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Lima"] } },
                    required: ["city"], additionalProperties: false },
    };
    await k.getByTestId("tools").fill(JSON.stringify([weather], null, 2));
    expect((await k.getByTestId("tools").getAttribute("aria-invalid")) === "false", "a valid tools array is marked invalid");
    await k.getByTestId("tool-choice").selectOption("required");
    // The plain envelope around the call takes some 80 tokens of the byte model.
    await turn(k, "What is the weather in Paris?", "200");
    const call = answers(k).last().getByTestId("tool-call");
    expect((await call.count()) === 1, `the answer shows ${await call.count()} calls`);
    const callName = await call.getByTestId("tool-call-name").textContent();
    const callArgs = await call.getByTestId("tool-call-arguments").textContent();
    let args;
    try {
      args = JSON.parse(callArgs);
    } catch {
      fail(`the call's arguments are not JSON: ${JSON.stringify(callArgs)}`);
    }
    expect(callName === "get_weather" && typeof args.city === "string", `the call shown: ${callName} ${callArgs}`);
    expect((await itemsK()) === itemsBefore, "the turn with tools was added to the conversation");
    await answers(k).last().screenshot({ path: path.join(outDir, "playground-tool-call.png") });
    await k.getByTestId("tools").fill(JSON.stringify([{ ...weather, parameters: { type: "object", properties: { n: { type: "integer", multipleOf: 3 } } } }]));
    await k.getByTestId("prompt").fill("And in Lima?");
    await k.getByTestId("prompt").press("Enter");
    await k.locator("#error").waitFor({ timeout: 30_000 });
    const toolRefusal = await k.locator("#error .error-message").textContent();
    expect(toolRefusal.includes("multipleOf"), `the tools refusal shown: "${toolRefusal}"`);
    await turnEnded(k);
    await k.getByTestId("tools").fill("");
    await k.getByTestId("tool-choice").selectOption("auto");
    log(`tools: the page shows ${callName}(${JSON.stringify(args)}); refused: "${toolRefusal}" ` +
        `(${Date.now() - toolsStart} ms)`);
    expectNoProblems();

    if (hybrid) {
      step = "a hybrid model: its layers by kind, its state beside every layer's KV cache";
      const m = (await api(baseKeys, "GET", `/v1/models/${hybrid}`, undefined, key)).json;
      const kinds = m.state_bytes_by_mixer;
      const layers = kinds.reduce((n, x) => n + x.layers, 0);
      const attention = kinds.find((x) => x.mixer === "attention").layers;
      expect(kinds.length === 2 && attention < layers && m.break_even_context > 0, `${hybrid}: ${JSON.stringify(m)}`);
      await k.locator("#new-conversation").click();
      await k.getByTestId("model").selectOption(hybrid);
      const info = await k.locator("#model-info").textContent();
      const names = kinds.map((x) => `${x.layers} ${x.mixer === "attention" ? `${m.attention} attention` : x.mixer}`);
      expect(info.startsWith(`${names.join(" + ")} layers · state `), `model info "${info}"`);
      const notes = [];
      for (const text of ["In the beginning", "And God said"]) {
        await turn(k, text);
        const last = answers(k).last();
        const note = await last.locator(".memory-note").first().textContent();
        const byMixer = await last.getByTestId("state-by-mixer").textContent();
        const position = Number(/state at (\d+) tokens/.exec(await last.locator(".turn-stats").innerText())?.[1]);
        const grows = `the state grows only in its ${attention} attention layers of ${layers}.`;
        // Below the break-even the KV cache of every layer is still the smaller: the page
        // names where it passes the state, /v1/models' figure.
        expect(position < m.break_even_context
          ? note === `The KV cache would pass the state at ${m.break_even_context} tokens: ${grows}`
          : note.startsWith("The KV cache would be ") && note.endsWith(`× the state and grows faster: ${grows}`),
          `at ${position} tokens (break-even ${m.break_even_context}): "${note}"`);
        expect(kinds.every((x) => byMixer.includes(`${x.layers} ${x.mixer} layers`)), `state by layer kind "${byMixer}"`);
        notes.push(`${position} tokens: "${note}"`);
      }
      expectNoProblems();
      log(`${hybrid}: "${info}"; ${notes.join("; ")}`);
    }
    await keyed.close();
  } finally {
    await browser.close();
  }
  log("PASS");
}

main().catch((e) => fail(e?.stack ?? String(e)));
