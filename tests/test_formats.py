"""nkmpi.formats: each format round trips, refuses another version and another
format, and a writer that fails leaves neither its file nor a temporary one behind; the
ranks of a run place a dataset's agents from a slice of its offsets each."""

import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import run_script
from nkmpi.errors import InputError
from nkmpi.formats import checkpoint, dataset, hdf5, result
from nkmpi.graph import Network, build_network
from nkmpi.monitor import METRICS

SCRIPTS = Path(__file__).parent / "mpi_scripts"

OFFSETS = np.array([0, 3, 3, 7, 10])
EDGES = np.array([[0, 1], [1, 2], [2, 3]])


def points(dtype=np.float64):
    return np.random.default_rng(0).standard_normal((10, 2)).astype(dtype)


def state(n_points=10, n_agents=4, k=2, p=2):
    """What a run hands the result and checkpoint writers, serially (comm None)."""
    rng = np.random.default_rng(1)
    return {"run_id": hdf5.new_run_id(), "n_agents": n_agents, "n_points": n_points, "agent_start": 0,
            "centers": rng.standard_normal((n_agents, k, p)), "initial_centers": rng.standard_normal((n_agents, k, p)),
            "row_start": 0, "metrics": {name: np.arange(3.0) for name in METRICS},
            "attrs": {"seed": 3, "graph": "ring"}}


def files(folder):
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dataset_round_trip(tmp_path, dtype):
    path = tmp_path / "d.h5"
    dataset.write_dataset(path, points(dtype), OFFSETS, labels=np.arange(10) % 3, edges=EDGES)
    info, rows = dataset.read_all(path)
    assert (info.n_points, info.n_features, info.n_agents, info.dtype) == (10, 2, 4, dtype)
    np.testing.assert_array_equal(rows, points(dtype))
    np.testing.assert_array_equal(info.offsets, OFFSETS)
    assert info.graph.edges is None and info.graph.n_edges == len(EDGES)       # stored as CSR
    np.testing.assert_array_equal(build_network("dataset", 4, dataset_graph=info.graph).edges, EDGES)
    np.testing.assert_array_equal(dataset.read_rows(info, info.block(2, 4)), points(dtype)[3:])
    np.testing.assert_array_equal(dataset.read_rows(info, info.block(0, 4), step=3), points(dtype)[::3])
    np.testing.assert_array_equal(dataset.read_labels(info, info.block(2, 3)), np.arange(3, 7) % 3)
    block = dataset.read_block(dataset.open_dataset(path, whole_offsets=False), 1, 3)
    assert (block.first, block.stop, block.row_start, block.row_stop) == (1, 3, 3, 7)
    np.testing.assert_array_equal(block.offsets, OFFSETS[1:4])
    assert files(tmp_path) == ["d.h5"]


def test_dataset_written_in_pieces_equals_the_whole(tmp_path):
    whole, pieces = tmp_path / "whole.h5", tmp_path / "pieces.h5"
    labels = np.arange(10) % 3
    dataset.write_dataset(whole, points(), OFFSETS, labels)
    blocks = [(start, points()[start:start + 4], labels[start:start + 4]) for start in (8, 0, 4)]
    dataset.write_dataset_rows(pieces, (10, 2), np.float64, OFFSETS, blocks, has_labels=True)
    with h5py.File(whole) as a, h5py.File(pieces) as b:
        assert dict(a.attrs) == dict(b.attrs) == {"format": "nkmpi-dataset", "version": 1}
        assert set(a) == set(b) == {"points", "agent_offsets", "labels"}
        for name in a:
            assert a[name].dtype == b[name].dtype
            np.testing.assert_array_equal(a[name][()], b[name][()])


@pytest.mark.parametrize("arguments,words", [
    ((points(), [0, 5]), ["'agent_offsets' ends at 5"]),
    ((np.ones((10, 2), dtype=int), OFFSETS), ["float32 or float64"]),
    ((points()[:, 0], OFFSETS), ["2-D"]),
    ((points(), OFFSETS, np.arange(9)), ["labels", "one label per point"]),
    ((points(), OFFSETS, None, [[0, 4]]), ["the graph: edge (0, 4) names an agent outside 0..3"]),
])
def test_write_dataset_refuses_a_file_nkmpi_would_refuse(tmp_path, arguments, words):
    with pytest.raises(InputError) as caught:
        dataset.write_dataset(tmp_path / "d.h5", *arguments)
    assert all(word in str(caught.value) for word in words), caught.value
    assert files(tmp_path) == []


def test_a_failing_dataset_writer_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "d.h5"
    dataset.write_dataset(path, points(), OFFSETS)
    before = path.read_bytes()

    def blocks():
        yield 0, points()[:5], None
        raise RuntimeError("a chunk failed")

    with pytest.raises(RuntimeError, match="a chunk failed"):
        dataset.write_dataset_rows(path, (10, 2), np.float64, OFFSETS, blocks())
    assert files(tmp_path) == ["d.h5"] and path.read_bytes() == before


def test_atomic_file_renames_on_success_and_removes_on_failure(tmp_path):
    path = tmp_path / "out.txt"
    with hdf5.atomic_file(path) as temporary:
        assert os.path.dirname(temporary) == str(tmp_path) and ".partial-" in temporary
        with open(temporary, "w") as f:
            f.write("whole")
    assert files(tmp_path) == ["out.txt"] and path.read_text() == "whole"
    with pytest.raises(KeyboardInterrupt):
        with hdf5.atomic_file(path) as temporary, open(temporary, "w") as f:
            f.write("half")
            raise KeyboardInterrupt
    assert files(tmp_path) == ["out.txt"] and path.read_text() == "whole"


def test_atomic_file_reports_a_folder_it_cannot_write_as_bad_input(tmp_path):
    path = tmp_path / "missing" / "out.txt"
    with pytest.raises(InputError, match="cannot write .*out.txt"):
        with hdf5.atomic_file(path) as temporary, open(temporary, "w"):
            pass


def test_result_round_trip(tmp_path):
    path, given = tmp_path / "r.h5", state()
    consensus = given["centers"].mean(axis=0)
    result.write_result(path, None, assignments=np.arange(10) % 2, consensus=consensus, **given)
    got = result.read_result(path)
    np.testing.assert_array_equal(got["consensus_centers"], consensus)
    for name in ("centers", "initial_centers"):
        assert got[name].dtype == np.float64
        np.testing.assert_array_equal(got[name], given[name])
    assert got["assignments"].dtype == np.int64
    np.testing.assert_array_equal(got["assignments"], np.arange(10) % 2)
    assert set(got["metrics"]) == set(METRICS)
    attrs = got["attrs"]
    assert (attrs["format"], attrs["version"], attrs["seed"], attrs["graph"]) == ("nkmpi-result", 1, 3, "ring")
    assert "nkmpi_version" in attrs
    assert files(tmp_path) == ["r.h5"]


def test_checkpoint_round_trip_one_ranks_share(tmp_path):
    path, given = tmp_path / "ck.h5", state()
    checkpoint.write_checkpoint(path, None, labels=np.arange(10, dtype=np.int32), interrupted=False, **given)
    share = checkpoint.read_checkpoint(path, 1, 3, 3, 7)
    np.testing.assert_array_equal(share["centers"], given["centers"][1:3])
    np.testing.assert_array_equal(share["initial_centers"], given["initial_centers"][1:3])
    assert share["labels"].dtype == np.int32
    np.testing.assert_array_equal(share["labels"], np.arange(3, 7))
    assert share["attrs"]["format"] == "nkmpi-checkpoint" and share["attrs"]["seed"] == 3
    assert set(share["metrics"]) == set(METRICS)


@pytest.mark.parametrize("interrupted", [True, False])
def test_a_checkpoint_says_whether_a_stop_wrote_it(tmp_path, interrupted):
    path = tmp_path / "ck.h5"
    checkpoint.write_checkpoint(path, None, labels=np.zeros(10, dtype=np.int32), interrupted=interrupted,
                                **state())
    attrs = checkpoint.read_checkpoint(path, 0, 4, 0, 10)["attrs"]
    assert attrs["interrupted"] == int(interrupted)
    assert checkpoint.interrupted(attrs, "ck.h5") is interrupted
    assert files(tmp_path) == ["ck.h5"]


def test_a_checkpoint_without_the_mark_still_resumes_and_is_not_interrupted(tmp_path):
    """Checkpoints of an nkmpi that did not mark stops stay version 1 and readable."""
    path = tmp_path / "ck.h5"
    checkpoint.write_checkpoint(path, None, labels=np.zeros(10, dtype=np.int32), interrupted=True, **state())
    with h5py.File(path, "r+") as f:
        del f.attrs["interrupted"]
    attrs = checkpoint.read_checkpoint(path, 0, 4, 0, 10)["attrs"]
    assert checkpoint.interrupted(attrs, "ck.h5") is False


@pytest.mark.parametrize("value", [2, -1, 0.5, True, "1", b"yes"])
def test_a_damaged_mark_is_bad_input(value):
    with pytest.raises(InputError, match="ck.h5: its interrupted attribute is .*not 0 or 1"):
        checkpoint.interrupted({"interrupted": hdf5.plain(value)}, "ck.h5")


def test_a_failing_state_writer_leaves_no_file(tmp_path):
    given = state()
    given["attrs"]["unstorable"] = object()
    with pytest.raises(TypeError):
        result.write_result(tmp_path / "r.h5", None, assignments=np.zeros(10, dtype=int), consensus=np.zeros((2, 2)),
                            **given)
    assert files(tmp_path) == []


def written(kind, path):
    """A file of each format at `path`, and how its reader reads it."""
    if kind == "dataset":
        dataset.write_dataset(path, points(), OFFSETS)
        return lambda: dataset.open_dataset(path)
    if kind == "result":
        result.write_result(path, None, assignments=np.zeros(10, dtype=int), consensus=np.zeros((2, 2)), **state())
        return lambda: result.read_result(path)
    checkpoint.write_checkpoint(path, None, labels=np.zeros(10, dtype=np.int32), interrupted=False, **state())
    return lambda: checkpoint.read_checkpoint(path, 0, 4, 0, 10)


@pytest.mark.parametrize("kind", ["dataset", "result", "checkpoint"])
def test_each_format_refuses_another_version(tmp_path, kind):
    read = written(kind, tmp_path / "f.h5")
    with h5py.File(tmp_path / "f.h5", "r+") as f:
        f.attrs["version"] = 2
    with pytest.raises(InputError, match=f"{kind} version 2 is not supported \\(this nkmpi reads version 1\\)"):
        read()


@pytest.mark.parametrize("kind", ["dataset", "result", "checkpoint"])
def test_each_format_refuses_another_format(tmp_path, kind):
    read = written(kind, tmp_path / "f.h5")
    other = "nkmpi-checkpoint" if kind == "result" else "nkmpi-result"
    with h5py.File(tmp_path / "f.h5", "r+") as f:
        f.attrs["format"] = other
    with pytest.raises(InputError, match=f"not an nkmpi {kind}: its format attribute is '{other}'"):
        read()


def test_read_result_refuses_a_damaged_file(tmp_path):
    path = tmp_path / "r.h5"
    result.write_result(path, None, assignments=np.zeros(10, dtype=int), consensus=np.zeros((2, 2)), **state())
    with h5py.File(path, "r+") as f:
        del f["metrics/objective"]
    with pytest.raises(InputError, match="do not have the shapes of result v1"):
        result.read_result(path)


def test_fingerprint_shares_add_up_alike_on_any_split():
    rows, network = points(), build_network("ring", 4)
    splits = ((0, 1), (1, 3), (3, 4))
    graph_whole = [network.rows(np.arange(4)).fingerprint_share()]
    graph_shares = [network.rows(np.arange(a, b)).fingerprint_share() for a, b in splits]
    sizes = np.diff(OFFSETS)
    offsets_whole = [checkpoint.offsets_share(range(4), sizes)]
    offsets_shares = [checkpoint.offsets_share(range(a, b), sizes[a:b]) for a, b in splits]
    whole = checkpoint.combine_fingerprints([checkpoint.block_fingerprint(rows, OFFSETS, range(4))], offsets_whole,
                                            graph_whole)
    shares = [checkpoint.block_fingerprint(rows[OFFSETS[a]:OFFSETS[b]], OFFSETS[a:b + 1] - OFFSETS[a],
                                           range(a, b)) for a, b in splits]
    assert checkpoint.combine_fingerprints(shares, offsets_shares, graph_shares) == whole
    assert set(whole) == set(checkpoint.FINGERPRINTS)
    moved_offsets = np.array([0, 4, 4, 7, 10])
    moved = checkpoint.block_fingerprint(rows, moved_offsets, range(4))
    moved = checkpoint.combine_fingerprints([moved], [checkpoint.offsets_share(range(4), np.diff(moved_offsets))],
                                            graph_whole)
    assert moved["fingerprint_points"] != whole["fingerprint_points"]
    assert moved["fingerprint_offsets"] != whole["fingerprint_offsets"]
    swapped = checkpoint.offsets_share([1, 0, 2, 3], sizes)            # the same counts on other agents
    assert swapped != offsets_whole[0] and swapped == checkpoint.offsets_share(range(4), sizes[[1, 0, 2, 3]])
    for row, column in ((0, 0), (9, 1)):           # one value one ulp off: another fingerprint
        nudged = rows.copy()
        nudged[row, column] = np.nextafter(nudged[row, column], np.inf)
        assert checkpoint.block_fingerprint(nudged, OFFSETS, range(4)) != checkpoint.block_fingerprint(
            rows, OFFSETS, range(4))
    single = rows.astype(np.float32)
    shares = [checkpoint.block_fingerprint(single[OFFSETS[a]:OFFSETS[b]], OFFSETS[a:b + 1] - OFFSETS[a], range(a, b))
              for a, b in splits]
    assert sum(shares) % 2**64 == checkpoint.block_fingerprint(single, OFFSETS, range(4))
    path = build_network("path", 4).rows(np.arange(4)).fingerprint_share()
    assert checkpoint.combine_fingerprints([0], offsets_whole, [path])["fingerprint_graph"] != \
        whole["fingerprint_graph"]


def test_plain_attributes():
    assert hdf5.plain(b"nkmpi-result") == "nkmpi-result"
    assert hdf5.plain(np.array([1, 2])) == [1, 2]
    assert hdf5.plain(np.int64(1)) == 1 and type(hdf5.plain(np.int64(1))) is int


def graph_file(path, indptr, indices):
    """A dataset of OFFSETS's 4 agents whose graph is the CSR given, as stored."""
    dataset.write_dataset(path, points(), OFFSETS)
    with h5py.File(path, "a") as f:
        f["graph/indptr"], f["graph/indices"] = indptr, indices
    return dataset.open_dataset(path)


@pytest.mark.parametrize("agents", [[0, 1, 2, 3], [1, 2], [0, 2, 3], [3], []])
def test_the_stored_graph_is_read_row_by_row(tmp_path, agents):
    """The rows of any agents, read from the file's CSR, are those rows of the graph written
    (the rest of the file is not read: runs of consecutive agents, one slice each)."""
    network = build_network("er:p=0.6", 9, seed=2)
    path = tmp_path / "d.h5"
    dataset.write_dataset(path, np.zeros((9, 1)), np.arange(10), edges=network.edges)
    with h5py.File(path) as f:
        assert "graph/edges" not in f and np.array_equal(f["graph/indptr"][()], network.indptr)
    indptr, indices = dataset.open_dataset(path).graph.rows(agents)
    expected = network.rows(agents)
    np.testing.assert_array_equal(indptr, expected.indptr)
    np.testing.assert_array_equal(indices, expected.indices)


def test_an_edge_list_of_earlier_files_is_still_read(tmp_path):
    path = tmp_path / "d.h5"
    dataset.write_dataset(path, points(), OFFSETS)
    with h5py.File(path, "a") as f:
        f["graph/edges"] = [[2, 1], [0, 1], [2, 3], [1, 2]]         # any order, a repeat
    info = dataset.open_dataset(path)
    assert info.graph.edges is not None
    np.testing.assert_array_equal(build_network(None, 4, dataset_graph=info.graph).edges, EDGES)


RING = (np.array([0, 2, 4, 6, 8]), np.array([1, 3, 0, 2, 1, 3, 0, 2]))


@pytest.mark.parametrize("edit, words", [
    (lambda f: f.create_dataset("graph/edges", data=EDGES), "holds both 'graph/edges' and 'graph/indptr'"),
    (lambda f: f.__delitem__("graph/indices"), "must hold both 'graph/indptr' and 'graph/indices', has only"),
    (lambda f: (f.__delitem__("graph/indptr"), f.create_dataset("graph/indptr", data=RING[0][:4])),
     "must hold M+1 = 5 offsets"),
    (lambda f: (f.__delitem__("graph/indptr"), f.create_dataset("graph/indptr", data=RING[0] * 1.0)),
     "must be an integer array"),
    (lambda f: (f.__delitem__("graph/indptr"), f.create_dataset("graph/indptr", data=RING[0] + 1)),
     "must run from 0 to the length of 'graph/indices', 8; runs from 1 to 9"),
])
def test_a_malformed_stored_graph_is_refused_on_opening(tmp_path, edit, words):
    graph_file(tmp_path / "d.h5", *RING)
    with h5py.File(tmp_path / "d.h5", "a") as f:
        edit(f)
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        dataset.open_dataset(tmp_path / "d.h5")


@pytest.mark.parametrize("indptr, indices, words", [
    ([0, 2, 1, 6, 8], RING[1], r"decreases at agent 1 \(2 -> 1\)"),
    (RING[0], [1, 3, 0, 2, 1, 4, 0, 2], r"row of agent 2 \(1, 4\) names an agent outside 0..3"),
    (RING[0], [1, 3, 2, 0, 1, 3, 0, 2], r"row of agent 1 \(2, 0\) is not strictly ascending"),
    (RING[0], [1, 3, 0, 0, 1, 3, 0, 2], r"row of agent 1 \(0, 0\) is not strictly ascending"),
    (RING[0], [1, 3, 0, 2, 2, 3, 0, 2], r"row of agent 2 \(2, 3\) names the agent itself"),
    (RING[0], [1, 3, 0, 2, 1, 3, 0, 1], "lists agent 3 among agent 2's neighbours but not 2 among 3's"),
])
def test_a_malformed_row_is_refused_when_read(tmp_path, indptr, indices, words):
    """Rows are checked as a rank reads them; symmetry when the whole graph is built (a
    run's ranks check it together: tests/test_mpi_run.py)."""
    info = graph_file(tmp_path / "d.h5", indptr, indices)
    with pytest.raises(InputError, match=words):
        build_network("dataset", 4, dataset_graph=info.graph)


@pytest.mark.mpi
@pytest.mark.parametrize("n_ranks", [1, 2, 3])
def test_ranks_place_blocks_from_a_slice_of_the_offsets_each(tmp_path, n_ranks):
    """formats.dataset.place_blocks against graph.block_placement on every agent's offsets,
    no rank reading more offsets than its slice or its block (tests/mpi_scripts/placement.py)."""
    proc = run_script(n_ranks, SCRIPTS / "placement.py", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "placements checked: 6" in proc.stdout, proc.stdout
