"""How several episode engines split a node's CPUs (components/cluster/episodes.py `core_shares`):
disjoint blocks per node, so two vLLM CPU engines never bind threads to the same core while cores
are left for each."""

from __future__ import annotations

from components.cluster.episodes import core_shares


def test_engines_on_one_node_get_disjoint_blocks_and_other_nodes_keep_theirs():
    placed = [("a", [0, 1, 2, 3]), ("b", [0, 1]), ("a", [0, 1, 2, 3])]
    assert core_shares(placed) == [[0, 1], [0, 1], [2, 3]]
    assert core_shares([("a", [0, 1]), ("a", [0, 1])]) == [[0], [1]]
    assert core_shares([("a", [0, 1, 2])] * 2) == [[0], [1, 2]]


def test_more_engines_than_cores_share_one_core_each_round_robin():
    assert core_shares([("a", [4, 5])] * 3) == [[4], [5], [4]]
