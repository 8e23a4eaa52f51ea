"""Run profiles and `-S section.key=value` overrides, resolved into one complete params document.

params.yaml holds the base values of every section and, under `profiles:`, each profile's
partial overlay (`default`: the embedded CPU run, the base itself plus its overlay if params.yaml
has one; `smoke`: the tiny test run; `gpu-8b`: the authors' setting). An overlay may start with
`extends: <profile>`: the named profile's overlay, then its own keys on top. A run's parameters are:
base, then the profile's overlay, then the `-S` overrides, in that order, deep-merged key by key.
Every section is then validated by its stage's config model, and all errors are reported
together, so a bad value fails before any heavy work starts.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from components.config.cluster import DEFAULT_RESOURCES, ClusterConfig
from components.config.schema import SECTIONS
from components.config.sections import PARAMS, ConfigError, error_lines, read_params

DEFAULT = "default"


def parse_override(text: str) -> tuple[list[str], Any]:
    """`critic.optim.lr=1e-5` -> (["critic", "optim", "lr"], 1e-05); the value is read as YAML."""
    key, sep, raw = text.partition("=")
    path = key.strip().split(".")
    if not sep or len(path) < 2 or not all(path):
        raise ConfigError(f"override '{text}' must look like section.key=value (e.g. critic.optim.lr=1e-5)")
    if path[0] not in SECTIONS:
        raise ConfigError(f"override '{text}': unknown section '{path[0]}' (known: {', '.join(SECTIONS)})")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"override '{text}': value is not valid YAML ({exc})") from None
    return path, _number(value)


def _number(value: Any) -> Any:
    """YAML 1.1 reads `1e-5` (no dot) as a string; a number was meant."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def deep_merge(base: dict, overlay: dict) -> dict:
    """A copy of `base` with `overlay` merged in: nested dicts key by key, other values replaced."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def set_path(doc: dict, path: list[str], value: Any) -> None:
    node = doc
    for key in path[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {'.'.join(path)}: '{key}' is a value, not a section")
    node[path[-1]] = value


def validate(doc: dict) -> dict[str, BaseModel]:
    """Every known section validated; all problems in one ConfigError."""
    problems, models = [], {}
    for name, model in SECTIONS.items():
        try:
            models[name] = model.model_validate(doc.get(name) or {})
        except ValidationError as exc:
            problems += error_lines(name, exc)
    unknown = sorted(set(doc) - set(SECTIONS))
    problems += [f"  {name}: unknown section" for name in unknown]
    if "cluster" in models:
        problems += unknown_stages(models["cluster"])
    if "task" in models:
        from components.cory.registry import PROMPT_TASKS
        from components.tasks.registry import TASKS
        from flows.planning.played import kinds

        if models["task"].name not in {*TASKS, *PROMPT_TASKS}:
            problems.append(f"  task.name: unknown task '{models['task'].name}' ({kinds()})")
    if problems:
        raise ConfigError("invalid run parameters:\n" + "\n".join(problems))
    return models


def unknown_stages(cluster: ClusterConfig) -> list[str]:
    """A problem line when `cluster.resources` names a stage the catalogue does not hold."""
    from components.stages.catalogue import STAGES

    unknown = sorted(set(cluster.resources) - set(STAGES) - {DEFAULT_RESOURCES})
    if not unknown:
        return []
    known = f"stages: {', '.join(STAGES)}, or {DEFAULT_RESOURCES}"
    return [f"  cluster.resources: unknown stage(s) {', '.join(unknown)} ({known})"]


def overlay_of(profiles: dict, name: str, seen: tuple[str, ...] = ()) -> dict:
    """A profile's overlay with its `extends:` chain merged in, parent first."""
    if name in seen:
        raise ConfigError(f"profile '{name}' extends itself ({' -> '.join([*seen, name])})")
    overlay = dict(profiles.get(name) or {})
    parent = overlay.pop("extends", None)
    if parent is None:
        return overlay
    if parent not in profiles:
        raise ConfigError(f"profile '{name}' extends unknown profile '{parent}'")
    return deep_merge(overlay_of(profiles, parent, (*seen, name)), overlay)


def resolve(profile: str | None = DEFAULT, overrides: list[str] = (), params: dict | None = None) -> dict:
    """The complete, validated params document of a run (without the `profiles` table). `profile`
    None: the base sections with no overlay (what `sweetflow eval` plays unless given --profile)."""
    params = read_params(PARAMS) if params is None else params  # the project's, never an iteration's
    profiles = params.get("profiles") or {}
    if profile not in (None, DEFAULT) and profile not in profiles:  # `default` may have an overlay, or be the base
        raise ConfigError(f"unknown profile '{profile}' (params.yaml has: {', '.join([DEFAULT, *profiles])})")
    overlay = overlay_of(profiles, profile) if profile is not None else {}
    doc = deep_merge({k: v for k, v in params.items() if k != "profiles"}, overlay)
    for text in overrides:
        path, value = parse_override(text)
        set_path(doc, path, value)
    validate(doc)
    return doc
