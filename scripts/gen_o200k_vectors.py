#!/usr/bin/env python3
"""Writes tests/data/tokenizers/o200k_pretokenize.json: texts and their splits by tiktoken's o200k
regex (pat_str of o200k_base / o200k_harmony), computed with the `regex` module (Debian
python3-regex), which implements \\p{..} classes, (?i:...) and (?!\\S) as tiktoken's engine does. The
C++ scanner (src/tokenizer/pretokenize.cpp, PreTokenizer::kO200k) is tested against this file.
Hand-picked texts, then random strings (fixed seed) over a pool that covers each class the
regex asks about: upper / title / lower / modifier / other letters, combining and spacing marks,
decimal / letter / other numbers, apostrophes and contractions, '/', newlines and other spaces.

    python3 scripts/gen_o200k_vectors.py > tests/data/tokenizers/o200k_pretokenize.json
"""
import json
import random
import sys

import regex

PAT = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

HAND = [
    "Hello world", "helloWorld HELLOworld ABCdef", "NASA's GPT-OSS /path/to/file abc/\nfooBAR 123",
    "I'M you're THEY'LL we'd it's", "1234567 12 3", "  leading and trailing  ", "a\n\nb\r\n c",
    "x \t\n y", "(normal) I'M 1234567 ok\n\n  next  ", "caf\u00e9 CAF\u00c9 e\u0301e\u0301",
    "\u01c5ungla \u01c4UNGLA", "\u02b0ello \u4e2d\u6587\u5b57 \u3042\u3044", "\u0915\u093f\u0924\u093e\u092c",
    "\u0661\u0662\u0663\u0664 \u216b \u00bd", "emoji \U0001f600\U0001f600 end", "a\u00a0b\u3000c\u2028d",
    "http://example.com/a/b", "!!!/\n", "'s 't 'RE", "\u0301start", " \u0301x", "A\u0301B\u0301c",
]

POOL = (list("abcxyzABCXYZ0123456789 \t\n\r.,!?'\"/-()[]") + ["'s", "'T", "'re", "'LL", "'d", "  ", "\r\n"]
        + ["\u00e9", "\u00c9", "\u03b1", "\u03a9", "\u01c5", "\u02b0", "\u4e2d", "\u3042", "\u0301",
           "\u0915", "\u093f", "\u0663", "\u216b", "\u00bd", "\U0001f600", "\u00a0", "\u3000", "\u20ac"])


def main():
    rng = random.Random(1234)
    texts = list(HAND)
    for _ in range(400):
        texts.append("".join(rng.choice(POOL) for _ in range(rng.randint(1, 24))))
    cases = []
    for t in texts:
        words = regex.findall(PAT, t)
        assert "".join(words) == t, t
        cases.append({"text": t, "words": words})
    json.dump({"regex_module": regex.__version__, "pattern": PAT, "cases": cases}, sys.stdout,
              ensure_ascii=True, indent=0)
    sys.stdout.write("\n")


main()
