"""The strings native tokenization must agree with Python's `tokenizers` on (>= 500, seeded): unicode
scripts, accents, CJK, emoji, punctuation runs, very long words, control characters, the empty string."""

from __future__ import annotations

import random
from pathlib import Path

FRAGMENTS = [
    "café", "naïve", "Ångström", "ÉLÉPHANT", "résumé", "Crème Brûlée", "São Paulo", "İstanbul", "straße", "ﬁne",
    "中文字符", "日本語のテキスト", "한국어 문장", "漢字とかな", "𠀀𠀁", "Ελληνικά", "Русский текст", "العربية",
    "हिन्दी भाषा", "ภาษาไทย", "😀", "🎉🎉", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "!!!", "???", "...", "---", "@@##$$%%",
    "(a)[b]{c}", "«quoted»", "“smart”", "it's", "don't", "we're", "I'm", "you've", "12345", "3.14159", "1,000,000",
    "\t", "\n", "\r\n", "  ", "\u00a0", "\u200b", "\u3000", "\x00", "\x07", "e\u0301", "a\u0308", "x" * 120,
    "supercalifragilisticexpialidocious" * 4, "https://example.com/a?b=c&d=e", "user@example.org", "#hashtag",
    "C++", "a_b_c", "CamelCaseWord", "UPPER lower", "[CLS]", "[SEP]", "<|endoftext|>", "tab\tseparated",
    "Ⅻ", "①②③", "½", "™", "µ", "ﬀ", "Ｆｕｌｌｗｉｄｔｈ", "ｶﾀｶﾅ", "z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇",
]


def strings(n: int = 520, seed: int = 7) -> list[str]:
    corpus = Path(__file__).resolve().parents[2] / "manifests" / "corpus"
    sentences = [s.strip() for f in sorted(corpus.glob("*.md")) for s in f.read_text().split(".") if s.strip()]
    rng = random.Random(seed)
    out = ["", " ", "a", *FRAGMENTS, *sentences[:80]]
    while len(out) < n:
        parts = [rng.choice(FRAGMENTS) if rng.random() < 0.6 else rng.choice(sentences)
                 for _ in range(rng.randint(1, 5))]
        out.append(rng.choice(["", " ", "  ", "\n"]).join(parts))
    return out
