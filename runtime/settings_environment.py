"""The settings from the environment, and back: loading, the effective configuration as
``NAME=value`` lines, and a child role's environment.

Generic over the schema (``runtime/settings.py`` binds it to ``Settings``): every variable is
read from its fields (runtime/settings_variables.py).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, SecretStr, ValidationError

from runtime.errors import ConfigError
from runtime.properties import MASK, PROPERTIES_INFIX, is_property_variable, read_client_properties
from runtime.settings_variables import (
    BOOTSTRAP_ALIAS,
    clusters,
    render,
    variable_of,
    variables,
)
from runtime.values import check_flow_name

if TYPE_CHECKING:
    from runtime.settings import ClusterSettings, Settings

# An environment variable under one of these prefixes must be one we know, or start-up stops.
# STATE_DIR, METRICS_PORT and METRICS_HOST are known by their exact names only.
PREFIXES = ("KAFKA_CLUSTERS_", "REPLICATION_", "OFFSETSYNC_", "EXACTLY_")
# kafka-reo's manifests (the seed) name the application with APPLICATION_NAME: here it names the
# flow, as REPLICATION_FLOW does, rather than being ignored without a word.
APPLICATION_NAME = "APPLICATION_NAME"
DEFAULT_MARK = "  # default"


def role_environment(settings: Mapping[str, str]) -> dict[str, str]:
    """The environment of a role started as a child process: this process's, without the
    product's own variables (a shell's exports for other clusters must not leak into it),
    with unbuffered output, plus `settings`."""
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith(PREFIXES) and name != APPLICATION_NAME
    }
    return {**inherited, "PYTHONUNBUFFERED": "1", **settings}


def load_from(model: type[Settings], environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from ``environ`` (default: ``os.environ``); ConfigError if anything is wrong."""
    env = dict(os.environ if environ is None else environ)
    _reject_unknown(model, env)
    _flow_from_application_name(model, env)
    data: dict[str, Any] = {}
    for cluster in clusters(model):
        properties = read_client_properties(
            cluster, env, bootstrap_variable=f"{cluster}_{BOOTSTRAP_ALIAS}"
        )
        data[cluster] = {
            "properties": {p.name: p.value for p in properties if not p.secret},
            "secret_properties": {p.name: SecretStr(p.value) for p in properties if p.secret},
            "property_files": {p.name: p.path for p in properties if p.path is not None},
        }
    for variable in variables(model):
        if variable.name in env:
            _put(data, variable.aliases, env[variable.name])
    try:
        return model(**data)
    except ValidationError as exc:
        raise _config_error(model, exc, env) from None


def render_config(settings: Settings) -> str:
    """``NAME=value`` per effective variable, sorted; defaults marked, secrets as ``****``."""
    model = type(settings)
    lines = []
    for variable in variables(model):
        parent: BaseModel = settings
        for part in variable.path[:-1]:
            parent = getattr(parent, part)
        value = getattr(parent, variable.path[-1])
        mark = "" if variable.path[-1] in parent.model_fields_set else DEFAULT_MARK
        if variable.path == ("destination", "topic") and value is None and settings.source.topic:
            value = settings.source.topic
            mark = f"{DEFAULT_MARK}: same as {variable_of(model, ('source', 'topic'))}"
        lines.append(f"{variable.name}={render(value)}{mark}")
    for cluster, field_name in clusters(model).items():
        cluster_settings: ClusterSettings = getattr(settings, field_name)
        shown = dict(cluster_settings.properties)
        shown.update(dict.fromkeys(cluster_settings.secret_properties, MASK))
        for prop, value in shown.items():
            lines.append(f"{cluster}_{PROPERTIES_INFIX}{prop.upper().replace('.', '_')}={value}")
    return "\n".join(sorted(lines)) + "\n"


def _flow_from_application_name(model: type[Settings], env: dict[str, str]) -> None:
    name = env.get(APPLICATION_NAME)
    if name is None:
        return
    flow_variable = str(model.model_fields["flow"].alias)
    flow = env.get(flow_variable)
    if flow is not None and flow != name:
        raise ConfigError(
            APPLICATION_NAME,
            f"names the flow, and {flow_variable}={flow} names another: set one of the two",
            name,
        )
    try:
        env[flow_variable] = check_flow_name(name)
    except ValueError as exc:
        raise ConfigError(APPLICATION_NAME, str(exc)) from None


def _reject_unknown(model: type[Settings], env: Mapping[str, str]) -> None:
    for name in sorted(env):
        if _is_known(model, name) or not name.upper().startswith(PREFIXES):
            continue
        guess = _guess(model, name)
        raise ConfigError(
            name, f"unknown variable; did you mean {guess}?" if guess else "unknown variable"
        )


def _is_known(model: type[Settings], name: str) -> bool:
    return any(variable.name == name for variable in variables(model)) or any(
        is_property_variable(cluster, name) for cluster in clusters(model)
    )


def _guess(model: type[Settings], name: str) -> str | None:
    upper = name.upper()
    if _is_known(model, upper):
        return upper  # the environment is case-sensitive; our names are upper-case
    known = [variable.name for variable in variables(model)]
    close = difflib.get_close_matches(upper, known, n=1, cutoff=0.8)
    return close[0] if close else None


def _put(data: dict[str, Any], path: tuple[str, ...], value: str) -> None:
    for part in path[:-1]:
        data = data.setdefault(part, {})
    data[path[-1]] = value


def _config_error(
    model: type[Settings], exc: ValidationError, env: Mapping[str, str]
) -> ConfigError:
    """The first of pydantic's errors as a ConfigError naming the environment variable."""
    error = exc.errors(include_url=False)[0]
    loc = tuple(str(part) for part in error["loc"])
    variable = next(
        (v.name for v in variables(model) if loc[: len(v.aliases)] == v.aliases),
        "_".join(loc),
    )
    if error["type"] == "missing":
        return ConfigError(variable, "is required but not set")
    # Our own validators raise ValueError("what is wrong"); pydantic's types say it themselves.
    message = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
    return ConfigError(variable, message, env.get(variable))
