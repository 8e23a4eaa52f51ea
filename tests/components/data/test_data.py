"""Task validation, record files, the split, and resumable reading."""

import json
import resource
import subprocess
import sys

import pytest

from components.data.records import RecordError, Trajectory, read_jsonl, read_resumable, write_jsonl
from components.data.split import Split, in_eval, select
from components.data.tasks import load_backend_tasks
from tests.factories import make_task, make_trajectory


def write_rows(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def good_row(name="f"):
    return make_task(name).model_dump()


def test_valid_tasks_load_with_stable_ids(tmp_path):
    tasks = load_backend_tasks(write_rows(tmp_path / "t.jsonl", [good_row("a"), good_row("b")]))
    assert len(tasks) == 2 and tasks[0].task_id != tasks[1].task_id and len(tasks[0].task_id) == 16
    assert tasks[0].task_id == make_task("a").task_id


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda r: r.pop("ground_truth"), "ground_truth"),
        (lambda r: r.update(test_cases="f(1)"), "test_cases"),
        (lambda r: r.update(test_cases={"test1": "  "}), "test_cases"),
        (lambda r: r.update(problem_description=""), "problem_description"),
    ],
)
def test_bad_row_names_file_line_and_field(tmp_path, mutate, field):
    bad = good_row()
    mutate(bad)
    path = write_rows(tmp_path / "t.jsonl", [good_row(), bad])
    with pytest.raises(RecordError) as err:
        load_backend_tasks(path)
    assert f"{path}:2" in str(err.value) and field in str(err.value)


def test_broken_json_is_reported_with_its_line(tmp_path):
    path = write_rows(tmp_path / "t.jsonl", [good_row(), "{not json", good_row()])
    with pytest.raises(RecordError, match=r"t.jsonl:2: not valid JSON"):
        load_backend_tasks(path)


def test_split_is_deterministic_disjoint_and_near_the_fraction():
    tasks = [make_task(f"f{i}") for i in range(400)]
    ev = select(tasks, Split.eval, 0.2, "salt")
    tr = select(tasks, Split.train, 0.2, "salt")
    assert sorted(ev + tr) == list(range(400)) and not set(ev) & set(tr)
    assert 50 <= len(ev) <= 110
    assert ev == select(list(tasks), Split.eval, 0.2, "salt")
    assert ev != select(tasks, Split.eval, 0.2, "other-salt")
    assert select(tasks, Split.all, 0.2, "salt") == list(range(400))


def test_split_membership_does_not_depend_on_file_order():
    tasks = [make_task(f"f{i}") for i in range(50)]
    members = {tasks[i].task_id for i in select(tasks, Split.eval, 0.3, "s")}
    assert members == {t.task_id for t in tasks if in_eval(t.task_id, 0.3, "s")}
    reversed_members = {t.task_id for t in reversed(tasks) if in_eval(t.task_id, 0.3, "s")}
    assert members == reversed_members


def traj(i):
    return make_trajectory(i)


def test_resumable_read_drops_a_torn_last_row_only(tmp_path, caplog):
    path = tmp_path / "trajs.jsonl"
    write_jsonl(path, [traj(0), traj(1)])
    with path.open("a") as fh:
        fh.write('{"task_id": "x", "task_in')
    assert [t.task_index for t in read_resumable(path, Trajectory)] == [0, 1]
    assert "dropped its torn last row (25 bytes" in caplog.text
    write_jsonl(path, [traj(2)], append=True)
    assert [t.task_index for t in read_resumable(path, Trajectory)] == [0, 1, 2]


def test_resumable_read_keeps_a_whole_last_row_whose_newline_was_cut(tmp_path):
    path = tmp_path / "trajs.jsonl"
    write_jsonl(path, [traj(0)])
    path.write_text(path.read_text() + traj(1).model_dump_json())  # the write stopped before "\n"
    assert [t.task_index for t in read_resumable(path, Trajectory)] == [0, 1]
    write_jsonl(path, [traj(2)], append=True)
    assert [t.task_index for t in read_jsonl(path, Trajectory)] == [0, 1, 2]


RECORD_WRITER = """
import sys
from components.data.records import write_jsonl
from tests.factories import make_trajectory
write_jsonl(sys.argv[1], (make_trajectory(i) for i in range(20)), append=True)
"""


def test_a_full_disk_mid_records_loses_no_whole_row_and_the_resume_completes(tmp_path):
    """A file-size limit stands in for a full disk (EFBIG as ENOSPC): the writer fails part way into a
    row; the resume keeps every whole row, drops the torn one and appends the rest."""
    path = tmp_path / "trajs.jsonl"
    sizes = [len(json.dumps(traj(i).model_dump(mode="json"), ensure_ascii=False)) + 1 for i in range(11)]
    limit = sum(sizes[:10]) + sizes[10] // 2

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        [sys.executable, "-c", RECORD_WRITER, str(path)], capture_output=True, text=True, preexec_fn=limited
    )
    assert proc.returncode == 1 and "File too large" in proc.stderr
    assert path.stat().st_size == limit  # ten whole rows and half of the eleventh
    kept = read_resumable(path, Trajectory)
    assert [t.task_index for t in kept] == list(range(10))
    write_jsonl(path, [traj(i) for i in range(10, 20)], append=True)
    assert [t.task_index for t in read_jsonl(path, Trajectory)] == list(range(20))


def test_resumable_read_still_rejects_a_bad_middle_row(tmp_path):
    path = tmp_path / "trajs.jsonl"
    path.write_text("garbage\n" + traj(0).model_dump_json() + "\n")
    with pytest.raises(RecordError):
        read_resumable(path, Trajectory)
