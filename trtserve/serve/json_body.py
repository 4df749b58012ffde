"""The base of every request body: a field takes the JSON types /openapi.json states for it, no others.

pydantic's lax mode takes `0`, `1` or `"yes"` for a boolean, `false` or `"3"` for an integer and
`true` or `"1.5"` for a number; the schema allows none of them, so a client that sent one was
told nothing by the schema (schemathesis found each: tests/fuzz). JsonBody refuses a value whose
JSON type the field's annotation does not allow, before pydantic converts it; pydantic then checks
values and bounds as before. A whole float (3.0) stays an integer, as JSON Schema counts it (and
the official clients may send one). Fields keep their plain types, so the JSON schema is
unchanged. Query parameters are text and are not request bodies: they stay lax.
"""

from __future__ import annotations

import functools
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, PlainValidator, ValidationError, WrapValidator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

_UNIONS = (Union, types.UnionType)


def fits(tp: Any, v: Any) -> bool:
    """Whether `v`, a decoded JSON value, has a JSON type that annotation `tp` allows."""
    origin = get_origin(tp)
    if origin is Annotated:
        return fits(get_args(tp)[0], v)
    if origin in _UNIONS:
        return any(fits(arg, v) for arg in get_args(tp))
    if tp is type(None):
        return v is None
    if tp is bool:
        return isinstance(v, bool)
    if tp is int:
        return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    if tp is float:
        return isinstance(v, int | float) and not isinstance(v, bool)
    if tp is str:
        return isinstance(v, str)
    if origin is Literal:
        return any(v == a and type(v) is type(a) for a in get_args(tp))
    if origin is list:
        (item,) = get_args(tp) or (Any,)
        return isinstance(v, list) and all(fits(item, x) for x in v)
    if origin is dict:
        _, value = get_args(tp) or (Any, Any)
        return isinstance(v, dict) and all(fits(value, x) for x in v.values())
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return isinstance(v, dict | tp)
    return True  # Any, and types no request body uses: pydantic's own checks stand


def expected(tp: Any) -> str:
    """What `tp` takes, in JSON's words: "an integer or null"."""
    origin = get_origin(tp)
    if origin is Annotated:
        return expected(get_args(tp)[0])
    if origin in _UNIONS:
        return " or ".join(dict.fromkeys(expected(arg) for arg in get_args(tp)))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    names = {type(None): "null", bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if tp in names:
        return names[tp]
    if origin is list:
        return f"an array, each item {expected((get_args(tp) or (Any,))[0])}"
    if origin is dict or (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return "an object"
    return "a JSON value"


@functools.cache
def _own_validator(model: type[BaseModel], name: str) -> bool:
    """Whether the field reads its input itself (a before, wrap or plain validator): then that
    validator, not the annotation, says what the field takes (KServe's stop_words: a string too)."""
    if any(isinstance(m, BeforeValidator | WrapValidator | PlainValidator) for m in model.model_fields[name].metadata):
        return True
    validators = model.__pydantic_decorators__.field_validators.values()
    return any({name, "*"} & set(v.info.fields) and v.info.mode != "after" for v in validators)


class JsonBody(BaseModel):
    """A request body (see the module's docstring); its nested models derive from it too."""

    @model_validator(mode="before")
    @classmethod
    def _json_types(cls, data: Any) -> Any:
        # One check before the fields, not a validator per field: a discriminator field may have none.
        if not isinstance(data, dict):
            return data
        wrong = [
            InitErrorDetails(
                type=PydanticCustomError("json_type", "must be {expected}", {"expected": expected(field.annotation)}),
                loc=(key,),
                input=data[key],
            )
            for name, field in cls.model_fields.items()
            if (key := field.alias or name) in data
            and not fits(field.annotation, data[key])
            and not _own_validator(cls, name)
        ]
        if wrong:
            raise ValidationError.from_exception_data(cls.__name__, wrong)
        return data
