// attnserve's llama3 chat template (server/http/chat_template.h) against node-llama-cpp's
// Llama 3 chat wrapper, an implementation of Meta's Llama 3 prompt format we did not
// write: for each chat, the text the wrapper builds for the model (its BOS, which our
// tokenizer adds, left out) must equal RenderChat's, byte for byte.
// Usage: node chat_template_check.mjs CHAT_TEMPLATE_DUMP
import {execFileSync} from "node:child_process";
import {Llama3ChatWrapper, SpecialToken} from "node-llama-cpp";

const dump = process.argv[2];
// Chats as both sides take them: messages alternate (the wrapper joins consecutive
// messages of one side into one turn, as Meta's template does not) and end with the user,
// whose answer is cued.
const chats = [
  [{role: "user", content: "Hi"}],
  [{role: "system", content: "Be brief."}, {role: "user", content: "Name a colour."}],
  [{role: "system", content: "You are a helpful assistant.\nAnswer in French."},
   {role: "user", content: "Hello"}, {role: "assistant", content: "Bonjour ! Comment puis-je aider ?"},
   {role: "user", content: "Quel temps fait-il à Paris ?"}],
  [{role: "user", content: "Line one\nLine two\n\n"}, {role: "assistant", content: " spaced "},
   {role: "user", content: "  indented"}],
  [{role: "user", content: "1"}, {role: "assistant", content: "2"}, {role: "user", content: "3"},
   {role: "assistant", content: "4"}, {role: "user", content: "日本語と emoji 🙂"}],
  [{role: "user", content: "<|eot_id|> as text"}, {role: "assistant", content: "{\"a\": [1, 2]}"},
   {role: "user", content: ""}],
];

const ours = JSON.parse(execFileSync(dump, {input: JSON.stringify({template: "llama3", chats})}));
const wrapper = new Llama3ChatWrapper();
let failures = 0;
chats.forEach((chat, i) => {
  const history = chat.map((m) =>
    m.role === "assistant" ? {type: "model", response: [m.content]} : {type: m.role, text: m.content});
  history.push({type: "model", response: []});  // the answer's cue
  const {contextText} = wrapper.generateContextState({chatHistory: history});
  const values = [...contextText.values];
  if (!(values[0] instanceof SpecialToken) || values[0].value !== "BOS") {
    throw new Error(`chat ${i}: the wrapper's text does not start with BOS`);
  }
  const theirs = contextText.constructor(values.slice(1)).toString();
  if (ours[i] !== theirs) {
    failures++;
    console.error(`chat ${i} differs:\n  attnserve  ${JSON.stringify(ours[i])}\n  llama3     ${JSON.stringify(theirs)}`);
  } else {
    console.log(`chat ${i}: ${chat.length} messages, ${theirs.length} characters, equal`);
  }
});
if (failures > 0) {
  console.error(`${failures} of ${chats.length} chats differ`);
  process.exit(1);
}
console.log(`all ${chats.length} chats render as node-llama-cpp's Llama 3 wrapper renders them`);
