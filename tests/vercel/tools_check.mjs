// Vercel's AI SDK (npm `ai` with `@ai-sdk/openai-compatible`, tests/vercel/package.json)
// calling tools on a running attnserve_server, as an application written for any
// OpenAI-compatible provider would. tests/openai/sdk_test.sh runs it.
//
//   node tools_check.mjs BASE MODEL   generateText with tools and toolChoice "required":
//                                     the SDK sends tools and tool_choice, validates each
//                                     call's input with the tool's zod schema (a call that
//                                     does not validate is a tool-error, not a call), runs
//                                     execute; then toolChoice "tool" (a named function)
//
// BASE is http://HOST:PORT. Exits non-zero with the reason when something does not hold.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, tool } from "ai";
import { z } from "zod";

const [base, model] = process.argv.slice(2);

function fail(what) {
  console.error(`vercel tools_check ${model}: FAIL: ${what}`);
  process.exit(1);
}
function expect(cond, what) {
  if (!cond) fail(what);
}

// Bounded inputs: a small model's free strings would run to maxOutputTokens.
const Weather = z.object({ city: z.enum(["Paris", "Tokyo", "Lima"]), celsius: z.boolean() });
const Time = z.object({ zone: z.enum(["UTC", "CET"]) });

const provider = createOpenAICompatible({ name: "attnserve", baseURL: `${base}/v1` });
const executed = [];
const tools = {
  get_weather: tool({
    description: "The weather in a city",
    inputSchema: Weather,
    execute: async (input) => { executed.push(["get_weather", input]); return { sky: "clear" }; },
  }),
  get_time: tool({
    description: "The time in a zone",
    inputSchema: Time,
    execute: async (input) => { executed.push(["get_time", input]); return { time: "12:00" }; },
  }),
};
// One call a turn: the byte-level default model rarely ends a turn on its own, so with
// parallel calls it would write calls until maxOutputTokens.
const providerOptions = { attnserve: { parallel_tool_calls: false } };

for (const [toolChoice, want] of [["required", null], [{ type: "tool", toolName: "get_weather" }, "get_weather"]]) {
  executed.length = 0;
  const result = await generateText({
    model: provider.chatModel(model), tools, toolChoice, providerOptions,
    temperature: 0, maxOutputTokens: 300, maxRetries: 0,
    prompt: "What is the weather in Paris, and the time?",
  });
  const what = `toolChoice ${JSON.stringify(toolChoice)}`;
  expect(result.finishReason === "tool-calls", `${what}: finishReason ${result.finishReason} (${result.text})`);
  const errors = result.content.filter((part) => part.type === "tool-error");
  expect(errors.length === 0, `${what}: tool errors ${JSON.stringify(errors)}`);
  expect(result.toolCalls.length === 1, `${what}: ${result.toolCalls.length} calls`);
  const call = result.toolCalls[0];
  if (want) expect(call.toolName === want, `${what}: called ${call.toolName}`);
  expect((call.toolName === "get_time" ? Time : Weather).safeParse(call.input).success,
         `${what}: input ${JSON.stringify(call.input)}`);
  expect(executed.length === 1 && executed[0][0] === call.toolName &&
         JSON.stringify(executed[0][1]) === JSON.stringify(call.input), `${what}: executed ${JSON.stringify(executed)}`);
  expect(result.toolResults.length === 1 && result.toolResults[0].toolCallId === call.toolCallId,
         `${what}: toolResults ${JSON.stringify(result.toolResults)}`);
  console.log(`vercel generateText ${what}: ${call.toolName}(${JSON.stringify(call.input)}) -> ${JSON.stringify(result.toolResults[0].output)}`);
}
