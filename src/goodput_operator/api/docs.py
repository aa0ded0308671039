"""docs/api.md from the generated CRD schemas: every field, its type, default and rules."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from goodput_operator.api.crds import Kind

_BOUNDS = (
    ("minimum", ">= {}"), ("maximum", "<= {}"), ("exclusiveMinimum", "> {}"),
    ("exclusiveMaximum", "< {}"), ("minLength", "length >= {}"), ("maxLength", "length <= {}"),
    ("minItems", "items >= {}"), ("maxItems", "items <= {}"),
    ("minProperties", "entries >= {}"), ("maxProperties", "entries <= {}"),
)


def _type(schema: dict[str, Any]) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = schema.get("type", "object")
    if kind == "array":
        return f"[]{_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map[string]{_type(schema['additionalProperties'])}"
    return str(kind)


def _pattern_names() -> dict[str, str]:
    from goodput_operator.api import base

    return {base.LABEL_KEY: "a qualified label key", base.DNS_SUBDOMAIN: "a DNS subdomain name",
            base.DNS_LABEL: "a DNS label", base.RESOURCE_NAME: "a resource name"}


def _rules(schema: dict[str, Any], required: bool) -> list[str]:
    rules = ["required"] if required else []
    if "enum" in schema:
        rules.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    for key, template in _BOUNDS:
        if key in schema:
            rules.append(template.format(schema[key]))
    if "pattern" in schema:
        named = _pattern_names().get(schema["pattern"])
        rules.append(named or f"matches `{schema['pattern']}`")
    rules.extend(v["message"] for v in schema.get("x-kubernetes-validations", []))
    return rules


def _rows(schema: dict[str, Any], path: str, required: bool) -> Iterator[str]:
    default = ""
    if "default" in schema:
        value = schema["default"]
        nested = isinstance(value, dict) and value and "properties" in schema
        default = "each field's default" if nested else f"`{json.dumps(value)}`"
    description = schema.get("description", "").replace("|", "\\|")
    rules = "; ".join(_rules(schema, required)).replace("|", "\\|")
    yield f"| `{path}` | {_type(schema)} | {default} | {rules} | {description} |"
    children = schema.get("properties", {})
    if schema.get("type") == "array":
        children = schema.get("items", {}).get("properties", {})
        path = f"{path}[]"
        needed = set(schema.get("items", {}).get("required", []))
    else:
        needed = set(schema.get("required", []))
    for name, child in children.items():
        yield from _rows(child, f"{path}.{name}", name in needed)


def render_api_docs(kinds: Sequence[Kind], crd: Callable[[Kind], dict[str, Any]]) -> str:
    lines = [
        "# API reference: goodput.dev/v1alpha1",
        "",
        "Generated from `goodput_operator.api` by `make generate`; do not edit by hand.",
        "Rules are checked at admission (schema bounds and CEL); the message shown is the one",
        "the API server returns. Defaults are applied by the API server.",
        "",
    ]
    for kind in kinds:
        root = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        lines += [
            f"## {kind.kind}",
            "",
            f"{kind.description}",
            "",
            f"`kubectl get {kind.plural}` (short name `{kind.short_names[0]}`, category "
            f"`goodput`), {kind.scope.lower()}-scoped.",
            "",
        ]
        for part in ("spec", "status"):
            lines += [f"### {kind.kind}.{part}", "",
                      "| field | type | default | rules | description |", "|---|---|---|---|---|"]
            schema = root["properties"][part]
            for name, child in schema.get("properties", {}).items():
                lines.extend(_rows(child, f"{part}.{name}", name in schema.get("required", [])))
            lines.append("")
        rules = root["properties"]["spec"].get("x-kubernetes-validations", [])
        if rules:
            lines += [f"Cross-field rules on `{kind.kind}.spec`:", ""]
            lines += [f"- {rule['message']}" for rule in rules]
            lines.append("")
    return "\n".join(lines)
