"""Tool specifications: validation, the compact signature the verifier reads, and specs built from Python callables.

The full view carries each tool's JSON schema; the compressed view carries `signature(spec)`, e.g.
`get_weather(city: str, unit: Literal["c", "f"] = "c") -> str  # Current weather for a city.`
Notation: required arguments `name: type`; optional ones `name: type = default` (default as JSON) or
`name?: type` when the schema gives no default; nested objects `{field: type, other?: type}`.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidToolSchemaError

FORCING = ("any", "required")  # tool_choice values that force at least one call
TOOL_CHOICES = (None, "auto", "none", *FORCING)  # ... besides a bound tool's name
JSON_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None", "array": "list", "object": "dict"}
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def check_tool_choice(choice: str | None, names: list[str]) -> None:
    """The one check of a tool_choice against the bound tools' names (every entry point calls it)."""
    if choice in TOOL_CHOICES and (names or choice not in FORCING):
        return
    if not names:
        raise InvalidToolSchemaError(f"tool_choice={choice!r} needs bound tools; bind some first.")
    if not isinstance(choice, str) or choice not in names:
        raise InvalidToolSchemaError(f"tool_choice {choice!r} names no bound tool; bound tools: {', '.join(names)}; "
                                     "or use 'auto', 'any', 'required' or 'none'.")


@dataclass
class ToolSpec:
    """A tool the model may call. `parameters` is a JSON schema of type object (empty dict: no arguments)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    returns: str | None = None  # shown as `-> returns` in the signature when given

    @classmethod
    def from_dict(cls, data: dict) -> ToolSpec:
        """From `{"name", "description", "parameters"}` or the OpenAI form `{"type": "function", "function": {...}}`."""
        function = data.get("function", data)
        return cls(function.get("name", ""), function.get("description") or "", function.get("parameters") or {})

    def to_dict(self) -> dict:
        """The OpenAI/Hermes function form the full view shows."""
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


def validate_tools(tools) -> list[ToolSpec]:
    """Return `tools` as ToolSpecs, or raise `InvalidToolSchemaError` naming the tool and what is malformed."""
    specs = [tool if isinstance(tool, ToolSpec) else ToolSpec.from_dict(tool) if isinstance(tool, dict) else _not_a_tool(tool) for tool in tools or ()]
    seen: set[str] = set()
    for spec in specs:
        if not spec.name:
            raise InvalidToolSchemaError("A tool has no name; give each tool a \"name\" of 1-64 letters, digits, '_', "
                                         "'.' or '-' (OpenAI form: {\"type\": \"function\", \"function\": {\"name\": ...}}).")
        if not isinstance(spec.name, str) or not NAME_PATTERN.match(spec.name):
            raise InvalidToolSchemaError(f"Tool name {spec.name!r} is invalid; use 1-64 letters, digits, '_', '.' or '-'.")
        if spec.name in seen:
            raise InvalidToolSchemaError(f"Two tools are named {spec.name!r}; tool names must be unique.")
        seen.add(spec.name)
        if not isinstance(spec.description, str):
            raise InvalidToolSchemaError(f"Tool {spec.name!r}: description must be a string.")
        _check_parameters(spec.name, spec.parameters)
    return specs


def signature(spec: ToolSpec, *, description: bool = True) -> str:
    """The compact one-line form of a tool: typed arguments, defaults, return type, first sentence of its doc."""
    defs = spec.parameters.get("$defs") or spec.parameters.get("definitions") or {}
    text = f"{spec.name}({_arguments(spec.parameters, defs)})"
    if spec.returns:
        text += f" -> {spec.returns}"
    sentence = first_sentence(spec.description) if description else ""
    return f"{text}  # {sentence}" if sentence else text


def first_sentence(text: str) -> str:
    """The first sentence of a docstring-like text, on one line."""
    paragraph = re.split(r"\n\s*\n", text.strip(), maxsplit=1)[0]
    paragraph = " ".join(paragraph.split())
    match = re.search(r"(?<=[.!?])\s", paragraph)
    return paragraph[: match.start()] if match else paragraph


def tool_spec_from_callable(function, *, name: str | None = None) -> ToolSpec:
    """A ToolSpec from a Python function's signature, annotations, defaults and docstring (used by the benchmark).

    Unannotated parameters get an empty schema (any type); defaults that are not JSON values are left out.
    Raises `InvalidToolSchemaError` when Python cannot tell the signature (some C builtins).
    """
    try:
        sig = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise InvalidToolSchemaError(f"Cannot read the signature of {function!r}: {exc}") from exc
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # unresolvable forward references: fall back to raw annotations
        hints = {}
    properties, required = {}, []
    for parameter in sig.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD) or parameter.name in ("self", "cls"):
            continue
        annotation = hints.get(parameter.name, parameter.annotation)
        schema = _annotation_schema(annotation)
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        elif _is_json_value(parameter.default):
            schema["default"] = parameter.default
        properties[parameter.name] = schema
    parameters = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    returns = None
    if sig.return_annotation is not sig.empty:
        returns = _annotation_name(hints.get("return", sig.return_annotation))
    return ToolSpec(name or function.__name__, inspect.getdoc(function) or "", parameters, returns)


# ---------------------------------------------------------------------------------------------------------------
# Schema -> signature


def _arguments(schema: dict, defs: dict) -> str:
    required = set(schema.get("required") or ())
    parts = []
    for arg, sub in (schema.get("properties") or {}).items():
        type_text = _type_text(sub, defs)
        if arg in required:
            parts.append(f"{arg}: {type_text}")
        elif isinstance(sub, dict) and "default" in sub:
            parts.append(f"{arg}: {type_text} = {json.dumps(sub['default'], ensure_ascii=False)}")
        else:
            parts.append(f"{arg}?: {type_text}")
    return ", ".join(parts)


def _type_text(schema, defs: dict, depth: int = 0) -> str:
    if not isinstance(schema, dict) or not schema:
        return "Any"
    if depth > 6:  # recursive $refs: stop expanding
        return "Any"
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "enum" in schema:
        return "Literal[" + ", ".join(json.dumps(value, ensure_ascii=False) for value in schema["enum"]) + "]"
    if "const" in schema:
        return f"Literal[{json.dumps(schema['const'], ensure_ascii=False)}]"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(dict.fromkeys(_type_text(option, defs, depth + 1) for option in schema[key]))
    if "allOf" in schema:
        return " & ".join(_type_text(option, defs, depth + 1) for option in schema["allOf"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_type_text({**schema, "type": one}, defs, depth + 1) for one in kind)
    if kind == "array":
        if isinstance(schema.get("prefixItems"), list):
            return "tuple[" + ", ".join(_type_text(item, defs, depth + 1) for item in schema["prefixItems"]) + "]"
        items = schema.get("items")
        return f"list[{_type_text(items, defs, depth + 1)}]" if items else "list"
    if kind == "object" or (kind is None and "properties" in schema):
        if schema.get("properties"):
            return "{" + _arguments(schema, defs) + "}"
        extra = schema.get("additionalProperties")
        return f"dict[str, {_type_text(extra, defs, depth + 1)}]" if isinstance(extra, dict) and extra else "dict"
    return JSON_TYPES.get(kind, "Any")


# ---------------------------------------------------------------------------------------------------------------
# Validation


def _not_a_tool(tool):
    raise InvalidToolSchemaError(f"A tool is a {type(tool).__name__}; pass ToolSpec(name, description, parameters) or a dict.")


def _check_parameters(name: str, parameters) -> None:
    if not isinstance(parameters, dict):
        raise InvalidToolSchemaError(f"Tool {name!r}: parameters must be a JSON schema dict, got {type(parameters).__name__}.")
    if not parameters:
        return  # a tool without arguments
    if parameters.get("type", "object") != "object":
        raise InvalidToolSchemaError(
            f"Tool {name!r}: parameters must be a schema of type 'object' (got type {parameters.get('type')!r}); "
            "wrap single values as named properties."
        )
    _check_schema(name, parameters, "parameters")


def _check_schema(name: str, schema, where: str) -> None:
    if not isinstance(schema, dict):
        raise InvalidToolSchemaError(f"Tool {name!r}: {where} must be a JSON schema dict, got {type(schema).__name__}.")
    kind = schema.get("type")
    for one in kind if isinstance(kind, list) else [kind] if kind is not None else []:
        if one not in JSON_TYPES:
            raise InvalidToolSchemaError(f"Tool {name!r}: {where} has unknown type {one!r}; use one of {', '.join(JSON_TYPES)}.")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise InvalidToolSchemaError(f"Tool {name!r}: {where}.properties must be a dict of property schemas.")
    for prop, sub in properties.items():
        _check_schema(name, sub, f"{where}.properties.{prop}")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise InvalidToolSchemaError(f"Tool {name!r}: {where}.required must be a list of property names.")
    missing = [r for r in required if r not in properties]
    if missing:
        raise InvalidToolSchemaError(f"Tool {name!r}: {where}.required names {missing}, which are not in its properties.")
    if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
        raise InvalidToolSchemaError(f"Tool {name!r}: {where}.enum must be a non-empty list.")
    if "$ref" in schema and not isinstance(schema["$ref"], str):
        raise InvalidToolSchemaError(f"Tool {name!r}: {where}.$ref must be a string.")
    items = schema.get("items")
    if items is not None:
        for index, item in enumerate(items if isinstance(items, list) else [items]):
            _check_schema(name, item, f"{where}.items" + (f"[{index}]" if isinstance(items, list) else ""))
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if key in schema:
            if not isinstance(schema[key], list):
                raise InvalidToolSchemaError(f"Tool {name!r}: {where}.{key} must be a list of schemas.")
            for index, option in enumerate(schema[key]):
                _check_schema(name, option, f"{where}.{key}[{index}]")
    for key in ("$defs", "definitions"):
        for def_name, sub in (schema.get(key) or {}).items():
            _check_schema(name, sub, f"{where}.{key}.{def_name}")


# ---------------------------------------------------------------------------------------------------------------
# Python annotations -> JSON schema

_PY_TO_JSON = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null", list: "array",
               tuple: "array", set: "array", frozenset: "array", dict: "object", bytes: "string"}


def _annotation_schema(annotation) -> dict:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return {"enum": [a for a in args if _is_json_value(a)]}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_annotation_schema(a) for a in args]}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set, frozenset):
        schema = {"type": "array"}
        if args and args[0] is not Ellipsis:
            schema["items"] = _annotation_schema(args[0])
        return schema
    if origin is dict or annotation is dict:
        return {"type": "object"}
    if annotation in _PY_TO_JSON:
        return {"type": _PY_TO_JSON[annotation]}
    return {}


def _annotation_name(annotation) -> str:
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _is_json_value(value) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v) for k, v in value.items())
    return False
