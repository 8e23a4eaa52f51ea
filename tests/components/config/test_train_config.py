"""Training-stage configurations reject contradictory or out-of-range values with a clear message."""

from __future__ import annotations

import pytest

from components.config.sections import ConfigError, load_section
from components.config.training import ActorConfig, Algo, CandidatesConfig, CriticConfig, OptimConfig, RankingConfig
from flows.planning.profiles import resolve


def write(tmp_path, text):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_the_authors_hyper_parameters_are_the_defaults_or_the_gpu_profile():
    optim = OptimConfig()  # the defaults are params.yaml's (CPU-sized lr and epochs; see test_config_defaults)
    assert (optim.batch_size, optim.adam_betas, optim.warmup_ratio, optim.min_lr_ratio, optim.grad_clip) == (
        8,
        (0.9, 0.95),
        0.03,
        0.1,
        1.0,
    )
    assert CriticConfig().beta == 0.1 and CriticConfig().normalize == "per_turn"
    actor = ActorConfig()
    assert (actor.algo, actor.beta, actor.nll_coef, actor.optim.epochs) == (Algo.sweet, 0.1, 0.01, 1)
    assert (CandidatesConfig().fraction, CandidatesConfig().per_state) == (0.1, 16)
    gpu = resolve("gpu-8b")  # the authors' lr 2e-7 and 4 critic epochs live in the gpu-8b profile
    critic, actor = CriticConfig.model_validate(gpu["critic"]), ActorConfig.model_validate(gpu["actor"])
    assert (critic.optim.lr, critic.optim.epochs, critic.optim.batch_size) == (2e-7, 4, 8)
    assert (actor.optim.lr, actor.optim.epochs, actor.optim.batch_size) == (2e-7, 1, 8)


@pytest.mark.parametrize(
    "text, field",
    [
        ("critic:\n  optim:\n    batch_size: 8\n    micro_batch_size: 3\n", "multiple of micro_batch_size"),
        ("critic:\n  optim:\n    lr: -1\n", "critic.optim.lr"),
        ("critic:\n  normalize: mean\n", "critic.normalize"),
        ("critic:\n  optim:\n    adam_betas: [0.9, 1.5]\n", "adam_betas"),
        ("critic:\n  optim:\n    lora: {r: 0}\n", "critic.optim.lora.r"),
        ("critic:\n  betta: 0.1\n", "critic.betta"),
    ],
)
def test_bad_critic_values_are_rejected_naming_the_field(tmp_path, text, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_section(CriticConfig, "critic", path=write(tmp_path, text))


@pytest.mark.parametrize(
    "model, section, text",
    [
        (CandidatesConfig, "candidates", "candidates:\n  fraction: 0\n"),
        (CandidatesConfig, "candidates", "candidates:\n  per_state: 1\n"),
        (RankingConfig, "ranking", "ranking:\n  baseline: ref\n"),
        (ActorConfig, "actor", "actor:\n  algo: ppo\n"),
        (ActorConfig, "actor", "actor:\n  nll_coef: -0.1\n"),
    ],
)
def test_other_sections_reject_out_of_range_values(tmp_path, model, section, text):
    with pytest.raises(ConfigError, match=f"invalid configuration.*\\[{section}\\]"):
        load_section(model, section, path=write(tmp_path, text))


def test_one_algorithm_enum_and_each_section_takes_its_family(tmp_path):
    from components.config.cory import CoryConfig
    from components.config.training import Family

    assert Algo.of(Family.collaborative) == {Algo.sweet, Algo.mtdpo, Algo.rft}
    assert Algo.of(Family.single_turn) == {Algo.cory, Algo.ppo} and Algo.ppo.single_turn
    assert not Algo.rft.traits.reference and Algo.rft.traits.needs_success and Algo.sweet.traits.reference
    path = write(tmp_path, "actor:\n  algo: cory\n")
    with pytest.raises(
        ConfigError, match=r"actor.algo takes a collaborative algorithm \(sweet \| mtdpo \| rft\), not cory"
    ):
        load_section(ActorConfig, "actor", path=path)
    with pytest.raises(ValueError, match=r"cory.algo takes a single-turn algorithm \(cory \| ppo\), not sweet"):
        CoryConfig(algo="sweet")
