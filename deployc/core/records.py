"""Shared building blocks of the manifest and profile schemas, and of every other frozen record."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
)

from deployc.core.sizes import SIZE_PATTERN, parse_size

# The schema version every manifest, profile and plan document names; the one place it is spelled.
ApiVersion = Literal["deployc/v1"]
API_VERSION: str = get_args(ApiVersion)[0]


class Frozen(BaseModel):
    """Every schema node and every record passed between stages: immutable, unknown keys refused
    (a saved plan or report from another deployc version fails loudly instead of losing fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, defer_build=True)


ByteSize = Annotated[
    int,
    BeforeValidator(parse_size),
    PlainSerializer(lambda v: v, return_type=int),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0},
                              {"type": "string", "pattern": SIZE_PATTERN.pattern}],
                    "description": "bytes, or a size such as 2GiB, 786KiB, 1.5MB"}),
]

class PackageFile(Frozen):
    """A file inside an installed Python package (found without importing it)."""

    package: str = Field(description="installed top-level Python package that ships the file")
    file: str = Field(description="path of the file inside the package")


# A GGUF file: a path relative to the manifest's folder, or {package, file}.
GgufRef = str | PackageFile

Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
