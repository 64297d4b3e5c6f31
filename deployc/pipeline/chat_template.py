"""A model's chat template, rendered once at build time into the text that goes before and after the user's
message: the runtimes (Python and the native runner) then need no template engine, only two strings.

The template is the model's own (a Jinja template in tokenizer_config.json, chat_template.jinja, or a GGUF
file's metadata): untrusted input, rendered in Jinja's immutable sandbox as transformers renders it, never
run as code. A template that does not leave the user's message as one verbatim piece (one that trims,
escapes or branches on the message's content) cannot be cut into a prefix and a suffix: that is said, with
the template's source named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployc.core.errors import DeploycError

# Stand-ins for the user's message and the system text: two different ones, so that a template whose
# frame depends on the content (its length, a trim) is caught.
_MARKERS = ("\x00deployc-message-a\x00", "\x00deployc-message-b-longer\x00")


class ChatTemplateProblem(DeploycError):
    exit_code = 2


@dataclass(frozen=True)
class ChatTemplate:
    source: str  # where it was read, for messages
    template: str
    special: dict[str, str]  # bos_token, eos_token, ... as the template's variables


@dataclass(frozen=True)
class ChatFrame:
    prefix: str  # the system text, the user's turn opening
    suffix: str  # the user's turn closing, the assistant's turn opening


def read(tokenizer_json: Path) -> ChatTemplate | None:
    """The chat template beside a tokenizer.json (tokenizer_config.json's chat_template, or a
    chat_template.jinja file), with its special tokens; None when there is none."""
    folder = tokenizer_json.parent
    config_file = folder / "tokenizer_config.json"
    config: dict[str, Any] = {}
    if config_file.is_file():
        try:
            loaded = json.loads(config_file.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ChatTemplateProblem(f"{config_file}: not valid JSON ({exc})") from None
        config = loaded if isinstance(loaded, dict) else {}
    texts = {k: _token_text(config.get(k)) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
    special = {k: v for k, v in texts.items() if v is not None}
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return ChatTemplate(str(jinja), jinja.read_text(encoding="utf-8"), special)
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if isinstance(template, str) and template.strip():
        return ChatTemplate(f"{config_file} (chat_template)", template, special)
    return None


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):  # an AddedToken as saved
        return str(value["content"])
    return None


def _render(t: ChatTemplate, messages: list[dict[str, str]]) -> str:
    from jinja2 import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(t.template).render(messages=messages, add_generation_prompt=True, tools=None,
                                                  **t.special)
    except TemplateError as exc:
        raise ChatTemplateProblem(f"the chat template in {t.source} cannot be rendered: {exc}") from None
    except Exception as exc:  # a template is data from a file: any failure of it is the file's
        raise ChatTemplateProblem(f"the chat template in {t.source} failed: {type(exc).__name__}: {exc}") from None


def frame(t: ChatTemplate, system: str | None) -> ChatFrame:
    """The text before and after the user's message in a conversation of the system text (or the template's
    own default when None) and one user message, ready for the assistant's answer."""
    frames = []
    for marker in _MARKERS:
        messages = ([{"role": "system", "content": system}] if system is not None else []) + \
            [{"role": "user", "content": marker}]
        text = _render(t, messages)
        if text.count(marker) != 1:
            raise ChatTemplateProblem(f"the chat template in {t.source} does not keep the user's message verbatim "
                                      "once, so it cannot be applied as a prefix and a suffix")
        before, after = text.split(marker)
        frames.append(ChatFrame(before, after))
    if frames[0] != frames[1]:
        raise ChatTemplateProblem(f"the chat template in {t.source} frames the user's message differently by its "
                                  "content, so it cannot be applied as a fixed prefix and suffix")
    return frames[0]
