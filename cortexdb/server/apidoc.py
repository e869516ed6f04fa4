"""``docs/api.md``, the API reference, generated from the OpenAPI document (``openapi.py``):
``python -m cortexdb.server.apidoc > docs/api.md`` (or ``cortexdb openapi --markdown``).

``tests/test_openapi.py`` fails when the committed file is not what this prints, so the
reference follows the route declarations: regenerate it after adding or changing a route.
"""

from __future__ import annotations

import sys
from typing import Any

INTRO = """\
# API reference

This page is generated from the server's OpenAPI document (`GET /v1/openapi.json`) by
`python -m cortexdb.server.apidoc > docs/api.md` (or `cortexdb openapi --markdown`): do not edit
it by hand. A test fails when it no longer matches the routes the server declares.

## Conventions

- **Base URL.** Every path below is relative to the server, `http://127.0.0.1:8077` for
  `make serve` ([server.md](server.md)).
- **Who is calling.** Send a signed token as `Authorization: Bearer <token>` (PASETO v4.public,
  or a JWT from a configured issuer); its `sub` is the caller. Where the deployment preset
  accepts unsigned callers (`dev_local`), the header `X-Cortex-Actor: user:alice` alone names the
  caller; beside a token it must name the token's subject. The two routes marked *open* need
  neither. See [security.md](security.md).
- **Bodies** are JSON objects (`Content-Type: application/json`) unless the route takes a file
  upload. A field a body does not define is refused with 422 `UNKNOWN_FIELD`, naming its path.
- **Query parameters** are only those listed for the route: any other, or one given twice, is
  refused with 400 `INVALID_QUERY`.
- **Errors** are one envelope, `{error_code, message, request_id, retriable, details?}`, with
  the codes of [errors.md](errors.md). A route not built yet answers 501 `NOT_IMPLEMENTED`.
- **Stability.** Every answer carries `X-Cortex-Stability: stable | beta | experimental`;
  experimental routes answer only where the deployment enables them.
- **Lists** are pages: `{items, next_cursor, has_more}`; pass `next_cursor` back as `cursor`.
- **Shapes.** The records' full JSON Schemas are shipped in `cortexdb/schemas/` and included in
  the OpenAPI document under `components.schemas`.
"""


def type_of(schema: Any) -> str:
    """A schema in a few words: ``string``, ``integer (1..1000)``, ``one of a, b``, ``array of X``."""
    if not isinstance(schema, dict) or not schema:
        return "any"
    if "$ref" in schema:
        return f"`{schema['$ref'].removeprefix('#/components/schemas/').replace('/$defs/', '.')}`"
    if "enum" in schema:
        return "one of " + ", ".join("null" if v is None else f"`{v}`" for v in schema["enum"])
    if "oneOf" in schema or "anyOf" in schema:
        return " or ".join(type_of(s) for s in schema.get("oneOf") or schema["anyOf"])
    if "allOf" in schema:
        return type_of(schema["allOf"][0])
    kind = schema.get("type", "any")
    names = [k for k in kind if k != "null"] if isinstance(kind, list) else [kind]
    text = " or ".join(names) or "null"
    if "array" in names and "items" in schema:
        text = f"array of {type_of(schema['items'])}"
    bounds = [f">= {schema['minimum']}" if "minimum" in schema else None,
              f"<= {schema['maximum']}" if "maximum" in schema else None,
              f"at most {schema['maxLength']} characters" if "maxLength" in schema else None,
              f"at most {schema['maxItems']} items" if "maxItems" in schema else None]  # fmt: skip
    bounds = [b for b in bounds if b]
    if bounds:
        text += f" ({', '.join(bounds)})"
    if isinstance(kind, list) and "null" in kind:
        text += ", nullable"
    return text


def cell(text: Any) -> str:
    return str(text or "").replace("|", "\\|").replace("\n", " ")


def fields_table(schema: dict[str, Any], doc: dict[str, Any]) -> list[str]:
    """The top-level fields of a body: a named schema's, or an inline one's."""
    target = schema
    if "$ref" in schema:
        target = resolve(doc, schema["$ref"])
    properties = target.get("properties") or {}
    if not properties:
        return [f"Body: {type_of(schema)}{' — ' + target['description'] if target.get('description') else ''}.", ""]
    required = set(target.get("required", ()))
    lines = []
    if "$ref" in schema:
        lines += [f"Body: {type_of(schema)} (shipped as `cortexdb/schemas/"
                  f"{schema['$ref'].rsplit('/', 1)[-1]}.schema.json`).", ""]  # fmt: skip
    lines += ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
    lines += rows(properties, required)
    return [*lines, ""]


def rows(properties: dict[str, Any], required: set[str], prefix: str = "") -> list[str]:
    """One row a field, and one for each field of an object it holds (``budgets.max_tokens``)."""
    out = []
    for name, inner in properties.items():
        inner = inner if isinstance(inner, dict) else {}
        out.append(f"| `{prefix}{name}` | {cell(type_of(inner))} | {'yes' if name in required else ''} | "
                   f"{cell(inner.get('description'))} |")  # fmt: skip
        if inner.get("properties"):
            out += rows(inner["properties"], set(inner.get("required", ())), f"{prefix}{name}.")
    return out


def resolve(doc: dict[str, Any], pointer: str) -> Any:
    node: Any = doc
    for part in pointer.removeprefix("#/").split("/"):
        node = node[part]
    return node


def operation(path: str, method: str, op: dict[str, Any], doc: dict[str, Any]) -> list[str]:
    lines = [f"### `{method.upper()} {path}`", "", f"{op['summary']}.".replace("..", "."), ""]
    facts = [f"stability: {op['x-cortex-stability']}"]
    if op.get("security") == []:
        facts.append("open (no caller needed)")
    lines += ["*" + "; ".join(facts) + "*", ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | required | meaning |", "| --- | --- | --- | --- | --- |"]
        for p in params:
            lines.append(f"| `{p['name']}` | {p['in']} | {cell(type_of(p['schema']))} | "
                         f"{'yes' if p.get('required') else ''} | {cell(p.get('description'))} |")  # fmt: skip
        lines.append("")
    body = op.get("requestBody")
    if body:
        content = body["content"]
        if "*/*" in content:
            lines += ["Body: the file, as `multipart/form-data` (field `file`) or as the raw bytes"
                      + (", or a JSON request holding it:" if "application/json" in content else "."), ""]  # fmt: skip
        elif not body.get("required"):
            lines += ["The body is optional.", ""]
        if "application/json" in content:
            lines += fields_table(content["application/json"]["schema"], doc)
    answers = []
    for status, response in op["responses"].items():
        if status == "default":
            continue
        content = response.get("content") or {}
        if not content:
            answers.append(f"{status} with no body")
            continue
        kind, media = next(iter(content.items()))
        if kind == "text/event-stream":
            answers.append(f"{status}: Server-Sent Events")
        elif kind == "*/*":
            answers.append(f"{status}: the bytes, with their own content type")
        else:
            schema = media["schema"]
            if "allOf" in schema:
                item = schema["allOf"][1]["properties"]["items"]["items"]
                answers.append(f"{status}: a page of {type_of(item)}")
            elif schema.get("$ref"):
                answers.append(f"{status}: {type_of(schema)}")
            else:
                answers.append(f"{status}: a JSON object")
    lines += ["Answers " + "; ".join(answers) + "; an error envelope otherwise.", ""]
    return lines


def markdown(doc: dict[str, Any]) -> str:
    families: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, ops in doc["paths"].items():
        family = path.split("/")[2] if path.count("/") >= 2 else path
        for method, op in ops.items():
            families.setdefault(family, []).append((path, method, op))
    lines = [INTRO, f"API version {doc['info']['version']}: {sum(len(v) for v in families.values())} operations.", ""]
    lines += ["## Contents", ""]
    lines += [f"- [{family}](#{family.replace('.', '')}): " + ", ".join(sorted({p for p, _, _ in ops}))
              for family, ops in families.items()]  # fmt: skip
    lines.append("")
    for family, ops in families.items():
        lines += [f"## {family}", ""]
        for path, method, op in ops:
            lines += operation(path, method, op, doc)
    return "\n".join(lines).rstrip() + "\n"


def generate() -> str:
    from .openapi import document
    from .routes import declared

    return markdown(document(declared()))


if __name__ == "__main__":
    sys.stdout.write(generate())
