"""Pydantic JSON Schema -> Kubernetes structural OpenAPI v3 schema.

What pydantic emits and Kubernetes refuses or reads differently, and what we do:
- `$ref`/`$defs` (structural schemas allow none): inlined, keeping the field's own
  description over the referenced model's docstring;
- `anyOf: [X, {type: null}]` for optional fields: X with `nullable: true`;
- `title`: dropped; `const`: an enum of one;
- `int | str` marked `x-kubernetes-int-or-string`: the `anyOf` integer/string pair that
  Kubernetes accepts for IntOrString;
- free-form objects (`extra="allow"` models, `dict[str, Any]`):
  `x-kubernetes-preserve-unknown-fields`;
- defaults under `status` are dropped: the operator writes status whole.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

JsonSchema = dict[str, Any]
_DROP = {"title", "$defs", "discriminator"}


def k8s_schema(model: type[BaseModel]) -> JsonSchema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(raw, raw.get("$defs", {}))


def _deref(node: JsonSchema, defs: dict[str, JsonSchema]) -> JsonSchema:
    """Inline a `$ref` (or pydantic's `allOf: [{$ref}]`), the referrer's keys winning."""
    ref = node.get("$ref")
    if ref is None and len(node.get("allOf", [])) == 1 and "$ref" in node["allOf"][0]:
        ref = node["allOf"][0]["$ref"]
        node = {k: v for k, v in node.items() if k != "allOf"}
    if ref is None:
        return node
    target = copy.deepcopy(defs[ref.rsplit("/", 1)[-1]])
    own = {k: v for k, v in node.items() if k != "$ref"}
    if "x-kubernetes-validations" in target and "x-kubernetes-validations" in own:
        own["x-kubernetes-validations"] = (target["x-kubernetes-validations"]
                                           + own["x-kubernetes-validations"])
    return _deref({**target, **own}, defs)


def _convert(node: JsonSchema, defs: dict[str, JsonSchema]) -> JsonSchema:
    node = _deref(node, defs)
    if "anyOf" in node:
        node = _collapse_any_of(node, defs)
    out: JsonSchema = {}
    for key, value in node.items():
        if key in _DROP or (key == "default" and value is None):
            continue
        if key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            # JSON Schema's numeric form -> OpenAPI 3.0's boolean beside minimum/maximum
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "properties":
            out["properties"] = {name: _convert(sub, defs)
                                 for name, sub in value.items()}
        elif key == "items" and isinstance(value, dict):
            out["items"] = _convert(value, defs)
        elif key == "additionalProperties":
            # False (extra="forbid") is the structural default: unknown fields are pruned,
            # and rejected under kubectl's strict field validation.
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif isinstance(value, dict):
                out["additionalProperties"] = _convert(value, defs)
        else:
            out[key] = value
    free_form = "properties" not in out and "additionalProperties" not in out
    if out.get("type") == "object" and free_form:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return _ordered(out)


_ORDER = ("type", "description", "default", "nullable", "enum", "format", "minimum",
          "exclusiveMinimum", "maximum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
          "minItems", "maxItems", "minProperties", "maxProperties", "required")


def _ordered(schema: JsonSchema) -> JsonSchema:
    """Keys in a reading order: what it is, what it means, its bounds, then its children."""
    rank = {key: i for i, key in enumerate(_ORDER)}
    return dict(sorted(schema.items(), key=lambda kv: (rank.get(kv[0], len(_ORDER)), kv[0])))


def _collapse_any_of(node: JsonSchema, defs: dict[str, JsonSchema]) -> JsonSchema:
    options = [_deref(option, defs) for option in node["anyOf"]]
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    nullable = any(option.get("type") == "null" for option in options)
    options = [option for option in options if option.get("type") != "null"]
    if rest.get("x-kubernetes-int-or-string"):
        return {**rest, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    if len(options) != 1:
        raise ValueError(f"cannot express anyOf {node['anyOf']} as a structural schema")
    merged = {**options[0], **rest}
    if nullable:
        merged["nullable"] = True
    return merged


def map_schema(schema: JsonSchema, change: Callable[[JsonSchema], JsonSchema]) -> JsonSchema:
    """A copy with CHANGE applied to every node: the schema itself, its properties, items
    and additionalProperties, all the way down."""
    out = change(dict(schema))
    if "properties" in out:
        out["properties"] = {k: map_schema(v, change) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = map_schema(out[key], change)
    return out


def strip_defaults(schema: JsonSchema) -> JsonSchema:
    """A copy without any `default` (for status, which the operator writes whole)."""
    return map_schema(schema, lambda node: {k: v for k, v in node.items() if k != "default"})
