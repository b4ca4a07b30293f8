#!/usr/bin/env python3
"""Write the API reference, docs/api.md, from the CRD's schema, its one source.

Usage:
    python scripts/gen-api-docs.py           # write docs/api.md from crds/
    python scripts/gen-api-docs.py --check   # exit 1 if docs/api.md is not what it writes (CI)

Every field of the schema becomes a row (its type, default, limits and description), every
validation rule (CEL, `x-kubernetes-validations`) a line under the object it sits on, and the
printer columns and subresources a table each. What the API means beyond one field (the timeout
rules, the rollout's predicates, the conditions) is prose in docs/consumergroup.md, written by
hand; this page is never edited by hand.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
CRD = REPO / "crds" / "consumergroups.staticfleet.io.yaml"
PAGE = REPO / "docs" / "api.md"
FIX = "python scripts/gen-api-docs.py"

Schema = dict[str, Any]


def _text(value: str) -> str:
    """A description as one line of a Markdown table cell, its characters taken literally."""
    text = " ".join(value.split())
    text = text.replace("\\", "\\\\").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([*_\[\]|`])", r"\\\1", text)


def _type(node: Schema) -> str:
    """The field's type as Go-like shorthand: string, int64, []string, map[string]string."""
    if node.get("x-kubernetes-preserve-unknown-fields") and "properties" not in node:
        return "object (any fields)"
    kind = node.get("type", "any")
    if kind == "array":
        return "[]" + _type(node.get("items") or {})
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return "map[string]" + _type(node["additionalProperties"])
    if kind == "integer" and node.get("format"):
        return str(node["format"])
    if kind == "string" and node.get("format"):
        return f"string ({node['format']})"
    return str(kind)


def _limits(node: Schema) -> list[str]:
    """The schema's own limits on a value, as short phrases."""
    out = []
    if "enum" in node:
        out.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    for key, word in (("minimum", "at least"), ("maximum", "at most"),
                      ("minLength", "length at least"), ("maxLength", "length at most"),
                      ("minItems", "items at least"), ("maxItems", "items at most")):
        if key in node:
            out.append(f"{word} {node[key]}")
    if "pattern" in node:
        out.append(f"matches `{node['pattern']}`")
    if node.get("nullable"):
        out.append("may be null")
    if node.get("x-kubernetes-list-type"):
        keys = node.get("x-kubernetes-list-map-keys")
        out.append(f"list type `{node['x-kubernetes-list-type']}`"
                   + (f" keyed by {', '.join(f'`{k}`' for k in keys)}" if keys else ""))
    return out


def _rules(node: Schema) -> list[str]:
    """The node's CEL validation rules: the message the API server answers with, else the rule."""
    out = []
    for rule in node.get("x-kubernetes-validations") or []:
        message = rule.get("message") or rule.get("messageExpression")
        out.append(_text(message) if message else f"`{rule['rule']}`")
    return out


def _default(node: Schema) -> str:
    if "default" not in node:
        return ""
    value = node["default"]
    return "`" + (yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
                  .removesuffix("...").strip()) + "`"


def _yes(value: object) -> str:
    return "yes" if value else "no"


def _children(node: Schema) -> list[tuple[str, Schema]]:
    """(name suffix, schema) of the fields under `node`: properties, array items, map values."""
    out = [(f".{name}", child) for name, child in (node.get("properties") or {}).items()]
    items = node.get("items")
    if isinstance(items, dict) and items.get("properties"):
        out = [(f"[].{name}", child) for name, child in items["properties"].items()]
    values = node.get("additionalProperties")
    if isinstance(values, dict) and values.get("properties"):
        out = [(f".*.{name}", child) for name, child in values["properties"].items()]
    return out


def _required(node: Schema) -> set[str]:
    inner = node.get("items") if isinstance(node.get("items"), dict) else node
    return set(node.get("required") or []) | set((inner or {}).get("required") or [])


def _rows(path: str, node: Schema, required: bool) -> list[str]:
    """The table rows of `node` at `path` and of every field under it, depth first."""
    cells = [_text(node.get("description", ""))]
    cells += [f"Limits: {'; '.join(limits)}." for limits in [_limits(node)] if limits]
    cells += [f"Rule: {rule}" for rule in _rules(node)]
    items = node.get("items")
    if isinstance(items, dict):
        cells += [f"Items: {'; '.join(limits)}." for limits in [_limits(items)] if limits]
        cells += [f"Rule on each item: {rule}" for rule in _rules(items)]
    name = f"`{path}`" + (" (required)" if required else "")
    rows = [f"| {name} | {_type(node)} | {_default(node)} | {'<br>'.join(c for c in cells if c)} |"]
    needed = _required(node)
    for suffix, child in _children(node):
        rows += _rows(path + suffix, child, suffix.rsplit(".", 1)[-1] in needed)
    return rows


HEADER = "| field | type | default | description |\n| --- | --- | --- | --- |"


def _section(title: str, root: str, node: Schema, intro: str) -> list[str]:
    """One `##` section: the object's own fields with scalars first, then one `###` table per
    field that is an object or a list of objects."""
    out = [f"## {title}", "", intro, ""]
    own_rules = _rules(node)
    if own_rules:
        out += ["Rules on the whole object:", ""] + [f"- {rule}" for rule in own_rules] + [""]
    needed = _required(node)
    flat = [(name, child) for name, child in (node.get("properties") or {}).items()
            if not _children(child)]
    nested = [(name, child) for name, child in (node.get("properties") or {}).items()
              if _children(child)]
    if flat:
        out += [HEADER]
        for name, child in flat:
            out += _rows(f"{root}.{name}", child, name in needed)
        out.append("")
    for name, child in nested:
        out += [f"### {root}.{name}", "", HEADER]
        out += _rows(f"{root}.{name}", child, name in needed)
        out.append("")
    return out


def render(crd: Schema) -> str:
    """The whole page for one CRD."""
    spec = crd["spec"]
    names = spec["names"]
    (version,) = spec["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    group_version = f"{spec['group']}/{version['name']}"
    out = [
        "<!-- Generated by scripts/gen-api-docs.py from crds/"
        f"{crd['metadata']['name']}.yaml; edit the CRD, then run `make api-docs`. -->",
        "",
        f"# API reference: {names['kind']} (`{group_version}`)",
        "",
        _text(schema.get("description", "")),
        "",
        "Generated from the CRD's schema (`crds/`), the one source of the API: every row here is "
        f"what `kubectl explain {names['singular']}.<field>` says. What the fields mean together "
        "(timeouts, rollouts, conditions) is in [the ConsumerGroup guide](consumergroup.md).",
        "",
        "| | |",
        "| --- | --- |",
        f"| API version | `{group_version}` |",
        f"| kind | `{names['kind']}` (list: `{names.get('listKind', names['kind'] + 'List')}`) |",
        f"| scope | {spec['scope']} |",
        f"| plural, singular | `{names['plural']}`, `{names['singular']}` |",
        f"| short names | {', '.join(f'`{n}`' for n in names.get('shortNames') or []) or '-'} |",
        f"| categories | {', '.join(f'`{c}`' for c in names.get('categories') or []) or '-'} |",
        f"| served, storage | {_yes(version.get('served'))}, {_yes(version.get('storage'))} |",
        "",
        f"`{version['name']}` is an alpha API: fields may still change between releases, and a "
        "change is named in CHANGELOG.md.",
        "",
    ]
    sub = version.get("subresources") or {}
    if sub:
        out += ["## Subresources", "", "| subresource | |", "| --- | --- |"]
        if "status" in sub:
            out.append("| `status` | the operator writes `.status`; a user's update of the "
                       "object leaves it alone |")
        if "scale" in sub:
            scale = sub["scale"]
            out.append(f"| `scale` | replicas `{scale['specReplicasPath']}`, observed "
                       f"`{scale['statusReplicasPath']}`, selector "
                       f"`{scale.get('labelSelectorPath', '-')}` (`kubectl scale`, HPA, KEDA) |")
        out.append("")
    columns = version.get("additionalPrinterColumns") or []
    if columns:
        out += [f"## Columns of `kubectl get {names['shortNames'][0]}`", "",
                "| column | type | from | meaning |", "| --- | --- | --- | --- |"]
        out += [f"| {c['name']} | {c['type']} | `{c['jsonPath']}` | "
                f"{_text(c.get('description', ''))} |" for c in columns]
        out.append("")
    props = schema.get("properties") or {}
    out += _section("spec", "spec", props["spec"], _text(props["spec"].get("description", "")))
    out += _section("status", "status", props["status"],
                    _text(props["status"].get("description", ""))
                    + " Written by the operator only.")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the page differs from what the CRD makes")
    parser.add_argument("--crd", type=Path, default=CRD)
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    page = render(yaml.safe_load(args.crd.read_text()))
    if args.check:
        if not args.page.exists() or args.page.read_text() != page:
            print(f"{args.page} is not what {args.crd.name} makes; run: {FIX}", file=sys.stderr)
            return 1
        return 0
    args.page.write_text(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
