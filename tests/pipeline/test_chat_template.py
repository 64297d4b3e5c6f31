"""A model's chat template as a prefix and a suffix around the user's message: the same text transformers'
renderer makes, rendered in a sandbox, refused where it cannot be cut that way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.gguf_files import TEMPLATE

from deployc.pipeline import chat_template
from deployc.pipeline.chat_template import ChatTemplate, ChatTemplateProblem

SPECIAL = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}


def _template(text: str) -> ChatTemplate:
    return ChatTemplate("t.json", text, SPECIAL)


def test_a_chatml_template_is_a_prefix_and_a_suffix() -> None:
    f = chat_template.frame(_template(TEMPLATE), None)
    assert f.prefix == "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n"
    assert f.suffix == "<|im_end|>\n<|im_start|>assistant\n"
    mine = chat_template.frame(_template(TEMPLATE), "Answer from the context.")
    assert mine.prefix == "<|im_start|>system\nAnswer from the context.<|im_end|>\n<|im_start|>user\n"


@pytest.mark.parametrize("system", [None, "Be brief."])
@pytest.mark.parametrize("message", ["How do honeybees find flowers?", "  two\nlines  ", "café {{ x }} <b>"])
def test_prefix_message_suffix_is_what_transformers_renders(system: str | None, message: str) -> None:
    from transformers.utils.chat_template_utils import render_jinja_template

    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": message}]
    rendered, _ = render_jinja_template(conversations=[messages], chat_template=TEMPLATE, add_generation_prompt=True,
                                        **SPECIAL)
    f = chat_template.frame(_template(TEMPLATE), system)
    assert f.prefix + message + f.suffix == rendered[0]


@pytest.mark.parametrize("text,said", [
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "attribute '__class__' of 'str' object is unsafe"),
    ("{{ messages[0]['content'] | upper }}", "does not keep the user's message verbatim once"),
    ("{% for m in messages %}{{ m['content'] }}{{ m['content'] }}{% endfor %}", "verbatim once"),
    ("{% if messages[0]['content'] | length > 22 %}long:{% endif %}{{ messages[0]['content'] }}",
     "frames the user's message differently by its content"),
    ("{{ raise_exception('only user and assistant roles') }}", "cannot be rendered: only user and assistant roles"),
    ("{% for %}", "cannot be rendered"),
], ids=["escape", "upper", "twice", "by-length", "raises", "syntax"])
def test_a_template_that_cannot_be_framed_or_misbehaves_is_named(text: str, said: str) -> None:
    with pytest.raises(ChatTemplateProblem) as exc:
        chat_template.frame(_template(text), None)
    assert "the chat template in t.json" in str(exc.value) and said in str(exc.value)


def test_the_template_is_read_beside_the_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    assert chat_template.read(tmp_path / "tokenizer.json") is None
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": TEMPLATE, "eos_token": {"content": "<|im_end|>", "special": True}}))
    t = chat_template.read(tmp_path / "tokenizer.json")
    assert t is not None and t.template == TEMPLATE and t.special == {"eos_token": "<|im_end|>"}
    (tmp_path / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    t = chat_template.read(tmp_path / "tokenizer.json")
    assert t is not None and t.source.endswith("chat_template.jinja")
