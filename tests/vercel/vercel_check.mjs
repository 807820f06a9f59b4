// Vercel's AI SDK (npm `ai` with `@ai-sdk/openai-compatible`, tests/vercel/package.json)
// against a running attnserve_server's HTTP front, as an application written for any
// OpenAI-compatible provider would call it. tests/openai/sdk_test.sh runs it.
//
//   node vercel_check.mjs object BASE MODEL   generateText with output: Output.object({schema})
//                                             and generateObject, zod schemas: the SDK sends
//                                             response_format json_schema, parses the answer
//                                             and validates it with the schema (it throws
//                                             NoObjectGeneratedError otherwise)
//
// BASE is http://HOST:PORT.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateObject, generateText, Output } from "ai";
import { z } from "zod";

const [command, base, model] = process.argv.slice(2);

function fail(what) {
  console.error(`vercel_check ${command}: FAIL: ${what}`);
  process.exit(1);
}
function expect(cond, what) {
  if (!cond) fail(what);
}

// Every string bounded, so the answer finishes well within maxOutputTokens.
const Elder = z.object({
  name: z.string().max(10),
  tribe: z.enum(["Judah", "Levi", "Benjamin"]),
  age: z.number().int(),
  sons: z.array(z.string().max(6)).max(3),
  righteous: z.boolean(),
});

async function objectCommand() {
  const provider = createOpenAICompatible({
    name: "attnserve",
    baseURL: `${base}/v1`,
    // With it the SDK sends the schema as response_format json_schema (strict); without,
    // only json_object.
    supportsStructuredOutputs: true,
  });
  const chat = provider.chatModel(model);
  for (const seed of [5, 6]) {
    const result = await generateText({
      model: chat, seed, temperature: 1, maxOutputTokens: 600, maxRetries: 0,
      prompt: "Describe an elder of Israel as JSON.",
      output: Output.object({ schema: Elder }),
    });
    expect(result.finishReason === "stop", `generateText: finishReason ${result.finishReason}`);
    // result.output is the SDK's own parse and zod validation of the text; check both.
    const output = result.output;
    expect(Elder.safeParse(output).success, `generateText: output ${JSON.stringify(output)}`);
    expect(JSON.stringify(JSON.parse(result.text)) === JSON.stringify(output),
           `generateText: the text ${result.text} is not the output`);
    console.log(`generateText Output.object (seed ${seed}): ${result.text}`);
  }
  const { object, finishReason } = await generateObject({
    model: chat, seed: 7, temperature: 1, maxOutputTokens: 600, maxRetries: 0,
    prompt: "Describe an elder of Israel as JSON.", schema: Elder, schemaName: "elder",
  });
  expect(finishReason === "stop", `generateObject: finishReason ${finishReason}`);
  expect(Elder.safeParse(object).success, `generateObject: ${JSON.stringify(object)}`);
  console.log(`generateObject: ${JSON.stringify(object)}`);
}

if (command === "object") {
  await objectCommand();
} else {
  fail(`unknown command ${command}`);
}
