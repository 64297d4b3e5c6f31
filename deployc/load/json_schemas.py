"""JSON Schemas of the manifest and the profile, for editors (yaml-language-server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deployc.core.atomic import write_atomic
from deployc.core.records import Frozen
from deployc.load.manifest import Manifest
from deployc.targets.profile import Profile

SCHEMA_FILES: dict[str, type[Frozen]] = {"manifest.schema.json": Manifest, "profile.schema.json": Profile}


def json_schemas() -> dict[str, str]:
    out: dict[str, str] = {}
    for filename, model in SCHEMA_FILES.items():
        schema: dict[str, Any] = model.model_json_schema(by_alias=True, mode="validation")
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"https://deployc.dev/schemas/v1/{filename}"
        out[filename] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def write_schemas(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, text in json_schemas().items():
        target = out_dir / filename
        write_atomic(target, text)
        written.append(target)
    return written
