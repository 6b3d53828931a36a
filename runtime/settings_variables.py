"""The environment variables a settings schema's fields make: their names, and values as text.

A field with an ``alias`` is an environment variable; a field whose type is a model (a
``ClusterSettings``) is a group of them, named ``<group alias>_<field alias>``
(``KAFKA_CLUSTERS_SOURCE`` + ``_`` + ``BOOTSTRAP_SERVERS``). Loading, printing, error messages
and the configuration page all read the variables from here, so adding one is one field.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from pydantic import BaseModel
from pydantic.fields import FieldInfo

# The alias of a cluster's servers: <cluster prefix>_BOOTSTRAP_SERVERS.
BOOTSTRAP_ALIAS = "BOOTSTRAP_SERVERS"


@dataclass(frozen=True)
class Variable:
    name: str  # KAFKA_CLUSTERS_SOURCE_TOPIC
    path: tuple[str, ...]  # ("source", "topic"): the fields
    aliases: tuple[str, ...]  # ("KAFKA_CLUSTERS_SOURCE", "TOPIC"): what pydantic's loc says
    info: FieldInfo  # the field itself: its default and description


def is_group(info: FieldInfo) -> bool:
    return isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)


@functools.cache
def variables(model: type[BaseModel]) -> tuple[Variable, ...]:
    """Every environment variable of ``model``, in field order: a field with an alias is one."""
    found = []
    for name, info in model.model_fields.items():
        if info.alias is None:
            continue
        if not is_group(info):
            found.append(Variable(info.alias, (name,), (info.alias,), info))
            continue
        group: type[BaseModel] = info.annotation  # type: ignore[assignment]
        for sub_name, sub in group.model_fields.items():
            if sub.alias is not None:
                found.append(
                    Variable(
                        f"{info.alias}_{sub.alias}", (name, sub_name), (info.alias, sub.alias), sub
                    )
                )
    return tuple(found)


@functools.cache
def clusters(model: type[BaseModel]) -> dict[str, str]:
    """Variable prefix of each cluster (KAFKA_CLUSTERS_SOURCE) -> its field (source)."""
    return {
        info.alias: name
        for name, info in model.model_fields.items()
        if info.alias and is_group(info)
    }


def variable_of(model: type[BaseModel], path: tuple[str, ...]) -> str:
    """The variable of a field path: ``("source", "topic")`` -> KAFKA_CLUSTERS_SOURCE_TOPIC."""
    return next(variable.name for variable in variables(model) if variable.path == path)


def render(value: object) -> str:
    """A setting's value as its variable would be written."""
    if value is None:
        return ""
    if isinstance(value, bool):  # as the docs write it, not Python's True
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(render(item) for item in value)
    if isinstance(value, re.Pattern):
        return str(value.pattern)
    return str(value)
