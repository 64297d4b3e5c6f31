"""Trains the offline RAG demo's decoder: a small Llama (transformers' LlamaForCausalLM) with its own
byte-level BPE tokenizer, on text installed from Debian's and this project's files, and saves it as a
Hugging Face directory (config.json, model.safetensors, tokenizer.json, generation_config.json, README.md)
that `source: {huggingface: decoder}` builds. Nothing is downloaded.

    .venv/bin/python manifests/train_decoder.py [--steps N] [--out manifests/decoder]

Text (licences in the directory's README):
- prose paragraphs of Python's own documentation, the reST sources Debian's `python3.11-doc` package
  installs (/usr/share/doc/python3.11/html/_sources; `apt-get install python3.11-doc`): fluent English;
- the demo corpus (manifests/corpus/*.md);
- question/answer examples in the pipeline's prompt format ("Context: ... Question: ... Answer:"), the
  answer being the sentence of the first retrieved passage that shares the most words with the question:
  made from the demo corpus (three passages per context, the relevant one first, as retrieval ranks them)
  and, so that the skill is copying from a context rather than remembering 42 paragraphs, from the
  documentation's paragraphs too.

Deterministic: every source read in sorted order, one seeded generator for every choice, one thread
count, a fixed number of steps: a rerun on the same machine writes the same bytes (checked by hashing
the safetensors file twice). About 30 minutes on 2 cores with the defaults.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import time
from pathlib import Path

MANIFESTS = Path(__file__).resolve().parent
DOCS = Path("/usr/share/doc/python3.11/html/_sources")
SEED = 0
HOLDOUT_EVERY = 50  # every 50th documentation paragraph is held out
VOCAB = 4096
SEQ = 384  # the pipeline's max_seq_len: a prompt of three passages and a question, and the answer
CHUNK_WORDS, CHUNK_OVERLAP = 60, 15  # rag_offline.yaml's index chunking
SPECIALS = ["<pad>", "<s>", "</s>"]
PROMPT = "Context:\n{context}\n\nQuestion: {question}\nAnswer:"  # rag_offline.yaml's template stage
STOPWORDS = frozenset("""a an the and or but if then else of to in on at by for with from as is are was were be been
being it its this that these those there their they them he she his her we you your our i not no do does did done
can could will would should may might must shall have has had how what when where which who whom why into than
so such also very more most many much some any each other about over under after before between through during
up down out off again further only own same too just both all few nor""".split())


# ---- text ----------------------------------------------------------------------------------------------
_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``([^`]*)``")
_EMPHASIS = re.compile(r"\*{1,2}([^*]+)\*{1,2}")
_LINK = re.compile(r"`([^`<]*?)\s*<[^>]*>`_+")
_REF = re.compile(r"`([^`]*)`_*")


def _plain(text: str) -> str:
    for pattern in (_ROLE, _LINK, _LITERAL, _EMPHASIS, _REF):
        text = pattern.sub(r"\1", text)
    return re.sub(r"\s+", " ", text).strip()


def doc_paragraphs(folder: Path = DOCS) -> list[str]:
    """Prose paragraphs of the reST sources: no directives, code, tables, headings or lists."""
    out: list[str] = []
    for path in sorted(folder.rglob("*.txt")):
        block: list[str] = []
        skipping = False
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines() + [""]:
            if skipping:  # an indented block after a directive or `::`
                if line and not line[0].isspace():
                    skipping = False
                else:
                    continue
            if not line.strip():
                text = " ".join(block)
                block = []
                if _prose(text):
                    out.append(_plain(text))
                continue
            underline = re.fullmatch(r"[=\-~^\"'`#*+]{3,}", line.strip())
            if line.startswith(("..", " ", "\t", "*", "-", "+", "|", "=", ">>>", "#")) or underline:
                if block and underline:
                    block = []  # a heading's title line
                if line.startswith(".."):
                    skipping = True
                continue
            block.append(line.strip())
            if line.rstrip().endswith("::"):
                skipping = True
    return out


def _prose(text: str) -> bool:
    words = text.split()
    return 12 <= len(words) <= 160 and text[:1].isupper() and text.rstrip().endswith(".") and "::" not in text


def corpus_passages() -> list[tuple[str, str, str]]:
    """(title, chunk, its text without the heading) of the demo corpus, chunked as rag_offline's index is."""
    from deployc.packaging.corpus import chunk_text

    out = []
    for path in sorted((MANIFESTS / "corpus").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        title = text.splitlines()[0].lstrip("# ").strip()
        for chunk in chunk_text(text, CHUNK_WORDS, CHUNK_OVERLAP):
            heading = f"# {title} "
            out.append((title, chunk, chunk[len(heading):] if chunk.startswith(heading) else chunk))
    return out


def sentences(passage: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", passage) if len(s.split()) >= 4]


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z][a-z0-9]+", text.lower()) if w not in STOPWORDS and len(w) > 2}


def answer_for(question: str, passage: str) -> str:
    """The passage's sentence that shares the most words with the question (the first of equals)."""
    found = sentences(passage) or [passage]
    q = words(question)
    return max(found, key=lambda s: len(q & words(s)))


def question_for(sentence: str, title: str | None, rng: random.Random) -> str:
    """A question a user might ask of `sentence`, in one of several shapes, naming two of its words."""
    keys = sorted(words(sentence) - words(title or ""))
    rng.shuffle(keys)
    about = (title or " ".join(keys[:1]) or "this").lower()
    k = [*keys, about, "this"][:2]
    forms = [f"What about {about} and {k[0]}?", f"How do {about} {k[0]}?",
             f"What does {about} have to do with {k[0]}?", f"Why {k[0]} and {k[1]}?",
             f"What is said about {k[0]} and {k[1]}?", f"Tell me about {k[0]} in {about}.",
             f"How is {k[0]} related to {k[1]}?", f"What happens with {k[0]}?", f"What is {k[0]}?",
             f"How does {about} work?", f"Tell me about {about}.", f"What is the {k[0]} of {about}?",
             f"Why does {about} need {k[0]}?", f"When is {k[0]} used in {about}?"]
    return rng.choice(forms)


def qa_examples(passages: list[tuple[str | None, str, str]], pool: list[str], count: int,
                rng: random.Random) -> list[str]:
    """`count` prompts with their answers: (title, passage, its body); the passage first, two others after it."""
    out = []
    for _ in range(count):
        title, passage, body = passages[rng.randrange(len(passages))]
        target = rng.choice(sentences(body) or [body])
        question = question_for(target, title, rng)
        context = [p for p in rng.sample(pool, 3) if p != passage][:2]
        # Retrieval ranks the passage that answers first nearly always, not always.
        context.insert(0 if rng.random() < 0.85 else rng.randrange(3), passage)
        prompt = PROMPT.format(context="\n\n".join(context), question=question)
        out.append(f"{prompt} {answer_for(question, body)}")
    return out


# ---- tokenizer and model -------------------------------------------------------------------------------
def train_tokenizer(texts: list[str]) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(texts, trainer=trainer)
    return tk


def _batches(rows: list[list[int]], batch: int, rng: random.Random) -> list[list[list[int]]]:
    order = list(range(len(rows)))
    rng.shuffle(order)
    return [[rows[i] for i in order[j:j + batch]] for j in range(0, len(order) - batch + 1, batch)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1800)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--out", type=Path, default=MANIFESTS / "decoder")
    args = parser.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    rng = random.Random(SEED)
    from deployc.packaging.corpus import chunk_text

    if not DOCS.is_dir():
        raise SystemExit(f"{DOCS} is missing: apt-get install python3.11-doc (the documentation's text)")
    docs = doc_paragraphs()
    heldout = docs[::HOLDOUT_EVERY]  # never trained on: the verification text (`verify.text`)
    docs = [p for i, p in enumerate(docs) if i % HOLDOUT_EVERY]
    corpus = corpus_passages()
    # Contexts are what the index holds: chunks of CHUNK_WORDS words.
    doc_chunks = [c for p in docs for c in chunk_text(p, CHUNK_WORDS, CHUNK_OVERLAP)]
    print(f"{len(docs)} documentation paragraphs ({len(doc_chunks)} chunks), {len(corpus)} corpus chunks")
    pool = [chunk for _, chunk, _ in corpus] + doc_chunks
    qa = qa_examples(list(corpus), pool, 12000, rng)
    qa += qa_examples([(None, p, p) for p in doc_chunks], pool, 12000, rng)
    tk = train_tokenizer(docs + [chunk for _, chunk, _ in corpus] + qa[:2000])
    bos, eos, pad = (tk.token_to_id(t) for t in ("<s>", "</s>", "<pad>"))

    def ids(text: str) -> list[int]:
        return [bos, *tk.encode(text).ids, eos]

    lm = [t for p in docs + [chunk for _, chunk, _ in corpus] * 20 for t in ids(p)]
    lm_rows = [lm[i:i + SEQ] for i in range(0, len(lm) - SEQ, SEQ)]
    qa_rows = [r for r in (ids(q) for q in qa) if len(r) <= SEQ]
    print(f"{len(lm_rows)} text rows of {SEQ} tokens, {len(qa_rows)} question/answer rows")

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                         rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=bos, eos_token_id=eos,
                         pad_token_id=pad, rope_theta=10000.0)
    model = LlamaForCausalLM(config)
    print(f"{sum(p.numel() for p in model.parameters()):,} parameters")
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = 100

    def lr_at(step: int) -> float:
        return min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(step, args.steps) / args.steps))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    batches: list[list[list[int]]] = []
    start = time.perf_counter()
    tokens = 0
    model.train()
    for step in range(args.steps):
        if not batches:  # each pass: question/answer and text batches in one seeded order
            batches = _batches(qa_rows, args.batch, rng) + _batches(lm_rows, args.batch, rng)
            rng.shuffle(batches)
        rows = batches.pop()
        width = max(len(r) for r in rows)
        x = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            x[i, :len(r)] = torch.tensor(r)
            mask[i, :len(r)] = 1
        labels = x.masked_fill(mask == 0, -100)
        loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        tokens += int(mask.sum())
        if step % 100 == 0 or step == args.steps - 1:
            rate = tokens / (time.perf_counter() - start)
            print(f"step {step:5d}  loss {loss.item():.3f}  {rate:,.0f} tokens/s", flush=True)
    save(model, tk, config, args.out, args.steps, tokens)
    write_readme(args.out, sum(p.numel() for p in model.parameters()), args.steps, args.batch, tokens, len(docs),
                 len(heldout), len(corpus), len(qa_rows), len(lm_rows))
    (args.out / "heldout.txt").write_text("\n\n".join(heldout) + "\n", encoding="utf-8")


def save(model: object, tk: object, config: object, out: Path, steps: int, tokens: int) -> None:
    import json as _json

    out.mkdir(parents=True, exist_ok=True)
    model.eval()  # type: ignore[attr-defined]
    model.save_pretrained(out, safe_serialization=True)  # type: ignore[attr-defined]
    tk.save(str(out / "tokenizer.json"))  # type: ignore[attr-defined]
    generation = {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id,  # type: ignore[attr-defined]
                  "pad_token_id": config.pad_token_id, "do_sample": False}  # type: ignore[attr-defined]
    (out / "generation_config.json").write_text(_json.dumps(generation, indent=2, sort_keys=True) + "\n")
    sha = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    print(f"saved {out}: {steps} steps, {tokens:,} tokens, model.safetensors sha256 {sha}")


def write_readme(out: Path, params: int, steps: int, batch: int, tokens: int, docs: int, heldout: int, corpus: int,
                 qa_rows: int, text_rows: int) -> None:
    c = json.loads((out / "config.json").read_text())
    notice = Path("/usr/share/doc/python3.11-doc/copyright").read_text()
    start = notice.index("PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2")
    (out / "PSF-LICENSE.txt").write_text(notice[start:notice.index("BEOPEN.COM LICENSE AGREEMENT")].rstrip() + "\n")
    shape = (f"hidden {c['hidden_size']}, {c['num_hidden_layers']} layers, {c['num_attention_heads']} heads, "
             f"MLP {c['intermediate_size']}, tied embeddings")
    (out / "README.md").write_text(f"""# A small Llama trained here (the RAG demo's decoder before SmolLM2)

**Not a real LLM.** A {params:,}-parameter Llama-style decoder (transformers' `LlamaForCausalLM`:
{shape}) with its own byte-level BPE tokenizer of {c["vocab_size"]} tokens,
trained on this project's machine (2 CPU cores) by `manifests/train_decoder.py` so that the offline RAG
demo answered in sentences before it had a real LLM (it now runs SmolLM2-135M-Instruct: docs/pipeline.md,
"The example's LLM"). It knows a little English and how to answer a question by copying the sentence of the
retrieved context that answers it, and nothing else; the decoder benchmarks build it, and `heldout.txt` is
the text every decoder example is judged on.

## How it was made
    apt-get install python3.11-doc      # the documentation's text (Debian package, no download at run time)
    .venv/bin/python manifests/train_decoder.py    # about 30 minutes on 2 cores; same bytes on a rerun

- {steps} steps of {batch} rows (up to 384 tokens), AdamW (lr 2e-3, 100 warm-up steps, cosine decay),
  {tokens:,} tokens seen, seed 0, 2 threads, deterministic algorithms: a rerun on the same machine writes
  the same bytes (the script's 20-step runs, twice, gave the same safetensors sha256).
- Text: {docs:,} prose paragraphs of Python 3.11's documentation (see below), packed in {text_rows:,} rows
  of 384 tokens with the demo corpus (`manifests/corpus`, {corpus} passages, repeated 20 times);
  {qa_rows:,} question/answer rows in the pipeline's prompt format (`Context: ... Question: ... Answer:`),
  each context three passages of 60 words as the index chunks them (the one that answers first in 85%
  of rows), the answer the sentence of that passage sharing the most words with the question: half from
  the demo corpus, half from chunks of the documentation.
- Tokenizer: byte-level BPE trained with `tokenizers` on the same text. Chosen by measurement over the
  embedder's WordPiece (30,522 tokens): with the same body, a step trained at 2,350 tokens/s with 4,096
  tokens and 830 tokens/s with 30,522 (the output layer dominates), and the model is 4.2M parameters
  instead of 11M.
- `heldout.txt`: every 50th documentation paragraph, never trained on: rag_offline.yaml's `verify.text`.

## Sources and licences
- Python 3.11 documentation, reStructuredText sources as Debian's `python3.11-doc` package
  (3.11.2-6+deb12u9) installs them under /usr/share/doc/python3.11/html/_sources: Copyright Python
  Software Foundation, under the PSF License Version 2 (/usr/share/doc/python3.11-doc/copyright).
  `heldout.txt` quotes {heldout} of its paragraphs, unchanged but for reStructuredText markup removed,
  under that licence (its text: `PSF-LICENSE.txt`); the model is trained on the others.
- The demo corpus and the question/answer text made from it: this project's own files.
""")


if __name__ == "__main__":
    main()
