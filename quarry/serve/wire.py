"""JSON records as the wire carries them: frozen pydantic models whose optional parts are
left out, not written as ``null``, where the wire format has always omitted them. Their
JSON schema (serialization mode) marks every field required except those omitted."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_serializer


def _omitted_are_optional(schema: dict[str, Any], model: type["OmittingNone"]) -> None:
    omitted = set(model.omit_when_none)
    if "required" in schema:
        schema["required"] = [name for name in schema["required"] if name not in omitted]


class OmittingNone(BaseModel):
    """A frozen record whose fields named in ``omit_when_none`` are left out of its JSON
    when None (the others are written, ``null`` included)."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_serialization_defaults_required=True,
                              json_schema_extra=_omitted_are_optional)
    omit_when_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_none(self, handler):
        data = handler(self)
        for name in self.omit_when_none:
            if getattr(self, name) is None:
                data.pop(name, None)
        return data
