"""One home for every number: params.yaml's base sections hold every default, and the config models'
defaults are the same values (the models validate and document; they never disagree with the file).

Rule for keys the file may leave out: a field whose code default is None (nothing set, e.g.
`critic.optim.lora`: full fine-tuning) may be absent, absence meaning None. Every other field must
be in params.yaml. `profiles:` overlays are not compared: they deliberately differ from the base.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from components.config.schema import SECTIONS
from tests.conftest import REPO

PARAMS = REPO / "params.yaml"
BASE = {k: v for k, v in yaml.safe_load(PARAMS.read_text()).items() if k != "profiles"}


def differences(where: str, default: BaseModel, raw: dict[str, Any]) -> list[str]:
    """`where.field` lines for each field whose code default differs from params.yaml's value, or that
    params.yaml lacks; nested models (optim, lora) are compared field by field against the parent's
    default (its default_factory), not the nested class's own defaults."""
    model = type(default)
    given = model.model_validate(raw)  # the file's values in the field's types (Path, enum, tuple)
    problems = []
    for name in model.model_fields:
        field, code = f"{where}.{name}", getattr(default, name)
        if name not in raw:
            if code is not None:
                problems.append(f"{field}: missing from params.yaml (code default {code!r})")
            continue
        value = getattr(given, name)
        if isinstance(code, BaseModel) and isinstance(raw[name], dict):
            problems += differences(field, code, raw[name])
        elif code != value:
            problems.append(f"{field}: code default {code!r} != params.yaml {value!r}")
    return problems


def test_params_yaml_has_exactly_the_registered_sections():
    assert set(BASE) == set(SECTIONS), f"params.yaml sections {sorted(BASE)} vs SECTIONS {sorted(SECTIONS)}"


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_params_key_is_a_field_of_its_model(section):
    try:
        SECTIONS[section].model_validate(BASE.get(section) or {})  # extra="forbid": unknown keys fail
    except ValidationError as exc:
        pytest.fail(f"params.yaml [{section}] does not validate:\n{exc}")


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_code_defaults_equal_params_yaml(section):
    problems = differences(section, SECTIONS[section](), BASE.get(section) or {})
    assert not problems, "code defaults disagree with params.yaml:\n  " + "\n  ".join(problems)


def test_the_comparison_names_the_field_and_both_values():
    from components.config.training import CriticConfig

    raw = {k: v for k, v in BASE["critic"].items() if k != "beta"}
    raw["optim"] = BASE["critic"]["optim"] | {"lr": 3e-4}
    problems = differences("critic", CriticConfig(), raw)
    assert "critic.optim.lr: code default 1e-05 != params.yaml 0.0003" in problems
    assert "critic.beta: missing from params.yaml (code default 0.1)" in problems
    assert not any("optim.lora" in p for p in problems)  # None default: may be omitted
