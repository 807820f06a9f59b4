#!/usr/bin/python3
"""Our SentencePiece tokenizer against python3-sentencepiece, an implementation we did
not write (Debian's, the same 0.1.97 library version but its own bindings).

Trains two tiny vocabularies with spm_train (Llama-style: identity normalization, extra
whitespace kept; and spm_train's defaults), then for ~50 strings checks that
  - tokenizer_oracle_tool's Encode(text) is [BOS] + sp.encode(text);
  - its continuation Encode is sp.encode(text) with add_dummy_prefix off (the model
    proto edited through sentencepiece_model_pb2);
  - the streamed bytes of those ids, and of random id sequences, equal sp.decode(ids)
    (random byte pieces: after SentencePiece's own U+FFFD rule for invalid UTF-8).
Run by CTest (tokenizer_oracle_test); exit status 0 when everything agrees.
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

STRINGS = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "hello", "Hello", "HELLO", "hello world", "x", "a b c d e f g",
    " leading space", "  two leading spaces", "   three", "trailing space ",
    "trailing spaces   ", " both ", "inner   spaces", "tab\tseparated", "\ttab first",
    "line one\nline two", "line\n", "\n", "\n\n", " \n ", "a\r\nb", " ", "  ",
    "café", "naïve résumé", "über Straße", "Ünïcödé", "日本語のテキスト", "中文", "한국어",
    "Привет, мир", "γειά σου κόσμε", "עברית", "العربية",
    "emoji 😀", "😀😃😄", "flags 🇫🇷🇯🇵", "family 👨‍👩‍👧", "mixed 😀 café 日本 end",
    "<s>", "</s> is text", "<unk>", "▁ literal marker", "▁▁", "a▁b",
    "numbers 1234567890", "punctuation !?.,;:()[]{}", "quote \"double\" 'single'",
    "ﬁ ligature", "Ⅻ roman", "full－width", "zero\u200bwidth",
]


def train(directory, name, flags):
    prefix = os.path.join(directory, name)
    text = os.path.join(directory, "train.txt")
    if not os.path.exists(text):
        rng = random.Random(5)
        words = ("in the beginning god created heaven and earth was without form void "
                 "darkness upon face of deep spirit moved waters said let there be light "
                 "café naïve über").split()
        with open(text, "w", encoding="utf-8") as f:
            for _ in range(400):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(4, 13))))
                f.write(rng.choice(".,;:!?") + "\n")
    subprocess.run([ARGS.spm_train, "--input=" + text, "--model_prefix=" + prefix,
                    "--vocab_size=320", "--model_type=bpe", "--byte_fallback=true",
                    "--character_coverage=1.0", "--num_threads=1",
                    "--hard_vocab_limit=false"] + flags,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    model_dir = os.path.join(directory, name + "_dir")
    os.makedirs(model_dir)
    os.link(prefix + ".model", os.path.join(model_dir, "tokenizer.model"))
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
        f.write('{"add_bos_token": true, "tokenizer_class": "LlamaTokenizer"}\n')
    return prefix + ".model", model_dir


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

    def encode(self, text, continuation):
        answer = self.ask(("C " if continuation else "E ") + text.encode("utf-8").hex())
        return [int(x) for x in answer.split()]

    def stream(self, ids):
        return bytes.fromhex(self.ask("S " + " ".join(map(str, ids))))

    def close(self):
        self.p.stdin.close()
        return self.p.wait()


def replace_invalid_utf8(data):
    """SentencePiece's Decode rule for byte pieces (string_util::DecodeUTF8): each byte
    that does not start a valid character becomes U+FFFD."""
    out = bytearray()
    i = 0
    while i < len(data):
        n = 0
        for size in (1, 2, 3, 4):
            try:
                ch = data[i:i + size].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if len(ch) == 1:
                n = size
            break
        if n == 0:
            out += "\ufffd".encode("utf-8")
            i += 1
        else:
            out += data[i:i + n]
            i += n
    return bytes(out)


def check(name, model_path, model_dir, failures):
    sp = spm.SentencePieceProcessor(model_file=model_path)
    proto = model_pb2.ModelProto()
    with open(model_path, "rb") as f:
        proto.ParseFromString(f.read())
    proto.normalizer_spec.add_dummy_prefix = False
    proto.ClearField("self_test_data")
    sp_cont = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
    tool = Tool(model_dir)
    checked = 0

    def expect(what, got, want):
        nonlocal checked
        checked += 1
        if got != want:
            failures.append(f"{name}: {what}: ours {got!r}, sentencepiece {want!r}")

    for s in STRINGS:
        ids = sp.encode(s)
        expect(f"Encode({s!r})", tool.encode(s, False), [sp.bos_id()] + ids)
        expect(f"continuation Encode({s!r})", tool.encode(s, True), sp_cont.encode(s))
        expect(f"stream of Encode({s!r})", tool.stream(ids), sp.decode(ids).encode("utf-8"))
        expect(f"stream of [BOS] + Encode({s!r})", tool.stream([sp.bos_id()] + ids),
               sp.decode([sp.bos_id()] + ids).encode("utf-8"))
    rng = random.Random(3)
    for trial in range(400):
        n = rng.randint(1, 16)
        if trial % 4 == 0:  # byte pieces only: valid and invalid UTF-8
            ids = [sp.piece_to_id("<0x%02X>" % rng.randrange(256)) for _ in range(n)]
        else:
            ids = [rng.randrange(sp.get_piece_size()) for _ in range(n)]
        expect(f"stream of {ids}", replace_invalid_utf8(tool.stream(ids)),
               sp.decode(ids).encode("utf-8"))
    # Sequences a model generates: pieces of text, in the middle of a session.
    for s in STRINGS:
        ids = sp.encode("And " + s)
        expect(f"stream of Encode('And ' + {s!r})", tool.stream(ids),
               sp.decode(ids).encode("utf-8"))
    if tool.close() != 0:
        failures.append(f"{name}: tokenizer_oracle_tool failed")
    print(f"{name}: {checked} comparisons")


def main():
    failures = []
    with tempfile.TemporaryDirectory() as directory:
        llama = train(directory, "llama", ["--normalization_rule_name=identity",
                                           "--remove_extra_whitespaces=false"])
        plain = train(directory, "plain", [])
        check("llama-style", *llama, failures)
        check("spm_train defaults", *plain, failures)
    for f in failures[:40]:
        print("MISMATCH", f)
    print(f"{len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    parser.add_argument("--spm_train", default="spm_train")
    ARGS = parser.parse_args()
    sys.exit(main())
