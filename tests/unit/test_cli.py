"""The command line: help everywhere, clear errors before heavy work."""
import time

import pytest
from typer.testing import CliRunner

from components.cli import app

runner = CliRunner()


@pytest.mark.parametrize("args", [[], ["data"], ["model"], ["data", "pull"], ["model", "prepare"], ["eval"],
                                  ["score"]])
def test_every_command_has_help(args):
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def test_eval_rejects_bad_params_before_any_work():
    start = time.perf_counter()
    result = runner.invoke(app, ["eval", "--limit", "0"])
    assert result.exit_code == 2 and "eval.limit" in result.output
    assert time.perf_counter() - start < 30


def test_eval_rejects_a_missing_model():
    result = runner.invoke(app, ["eval", "--model", "/nonexistent/model-folder"])
    assert result.exit_code == 2 and "/nonexistent/model-folder" in result.output


def test_eval_rejects_seed_and_seeds_together():
    result = runner.invoke(app, ["eval", "--seed", "1", "--seeds", "1,2"])
    assert result.exit_code == 2 and "not both" in result.output


def test_score_reports_a_missing_file(tmp_path):
    result = runner.invoke(app, ["score", "--tasks", str(tmp_path / "no.jsonl"), "--answers",
                                 str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "s.jsonl")])
    assert result.exit_code == 2 and "not found" in result.output


def test_from_hub_fails_fast_offline(monkeypatch):
    from components.data import pull

    monkeypatch.setattr(pull, "HUB_HOST", ("127.0.0.1", 9))  # nothing listens on the discard port
    start = time.perf_counter()
    result = runner.invoke(app, ["data", "pull", "--from-hub"])
    assert result.exit_code == 2 and "not reachable" in result.output
    assert time.perf_counter() - start < 10
