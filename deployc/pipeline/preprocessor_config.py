"""A Hugging Face `preprocessor_config.json` that an image or audio stage takes its settings from. Pure
Python (reads JSON); problems are returned for validate to locate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Problem = tuple[str, str]  # (field of the stage, message)


def read_config(path: str | None, folder: Path) -> tuple[dict[str, Any], list[Problem]]:
    if path is None:
        return {}, []
    if Path(path).is_absolute() or ".." in Path(path).parts:
        return {}, [("preprocessor", f"{path!r} must stay inside the manifest's folder")]
    file = folder / path
    try:
        data = json.loads(file.read_text())
    except OSError:
        return {}, [("preprocessor", f"file not found: {path}")]
    except ValueError as exc:
        return {}, [("preprocessor", f"{path} is not valid JSON: {exc}")]
    if not isinstance(data, dict):
        return {}, [("preprocessor", f"{path} is not a JSON object")]
    return data, []
