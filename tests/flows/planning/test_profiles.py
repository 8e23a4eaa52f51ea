"""Run parameters: base params.yaml, then a profile's overlay, then -S overrides; validated as a whole."""

from __future__ import annotations

import pytest

from components.config.sections import ConfigError, read_params
from flows.planning.profiles import deep_merge, parse_override, resolve

BASE = {
    "critic": {"beta": 0.1, "optim": {"lr": 1e-5, "epochs": 2}},
    "rollouts": {"limit": 8},
    "profiles": {"tiny": {"critic": {"optim": {"epochs": 1}}, "rollouts": {"limit": 2}}},
}


def test_profile_then_overrides_deep_merge_in_order():
    doc = resolve("tiny", ["critic.optim.lr=3e-4", "rollouts.limit=null", "eval.seeds=[0, 1]"], params=BASE)
    assert doc["critic"] == {"beta": 0.1, "optim": {"lr": 3e-4, "epochs": 1}}
    assert doc["rollouts"]["limit"] is None and doc["eval"]["seeds"] == [0, 1] and "profiles" not in doc
    assert resolve(params=BASE)["critic"]["optim"]["epochs"] == 2  # default: the base as it is
    assert BASE["critic"]["optim"]["epochs"] == 2  # nothing mutated


@pytest.mark.parametrize(
    "text, message",
    [
        ("critic.optim.lr", "section.key=value"),
        ("=3", "section.key=value"),
        ("lr=3", "section.key=value"),
        ("critics.beta=1", "unknown section 'critics'"),
        ("critic.beta=[1", "not valid YAML"),
    ],
)
def test_malformed_overrides_are_rejected(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_override(text)


def test_every_problem_is_reported_together_before_any_work():
    with pytest.raises(ConfigError) as err:
        resolve(overrides=["critic.optim.lr=-1", "actor.algo=ppo", "candidates.per_state=1"], params=BASE)
    text = str(err.value)
    assert "critic.optim.lr" in text and "actor.algo" in text and "candidates.per_state" in text
    with pytest.raises(ConfigError, match="unknown profile 'huge'.*default, tiny"):
        resolve("huge", params=BASE)


def test_a_profile_extends_another_and_cycles_are_refused():
    profiles = BASE["profiles"] | {"big": {"extends": "tiny", "rollouts": {"limit": 64}}}
    doc = resolve("big", params=BASE | {"profiles": profiles})
    assert doc["rollouts"]["limit"] == 64 and doc["critic"]["optim"] == {"lr": 1e-5, "epochs": 1}
    assert "extends" not in doc
    loop = {"a": {"extends": "b"}, "b": {"extends": "a"}}
    with pytest.raises(ConfigError, match="extends itself"):
        resolve("a", params=BASE | {"profiles": loop})
    with pytest.raises(ConfigError, match="unknown profile 'nope'"):
        resolve("a", params=BASE | {"profiles": {"a": {"extends": "nope"}}})


def test_the_shipped_profiles_are_valid():
    params = read_params()
    assert {"smoke", "gpu-8b"} <= set(params["profiles"])
    for name in params["profiles"]:
        resolve(name, params=params)
    gpu = resolve("gpu-8b", params=params)
    assert gpu["critic"]["optim"]["lr"] == 2e-7 and gpu["critic"]["optim"]["epochs"] == 4  # the authors' values
    assert gpu["episode"]["max_tokens"] == gpu["candidates"]["max_tokens"] == 1024  # the authors' turn length
    assert gpu["cory"]["lr"] == 1e-4 and gpu["cory"]["ppo_lr"] == 1e-5  # the paper's GSM8K rates
    assert deep_merge({"a": {"b": 1}}, {"a": {"c": 2}}) == {"a": {"b": 1, "c": 2}}
