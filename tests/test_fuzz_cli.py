"""Fuzz tests of every entry point: `nkmpi info`, `summary`, `status`, `simulate`, `run` (under
mpiexec on 1 and 2 ranks) and the NKMeans estimator, with hypothesis.

The oracle is the project's promise (docs/design.md: no hangs, nothing lost, bad input gets one error
line and status 2), whatever the input:

* status 0 with a valid result (nkmpi.formats.result.read_result reads it; its centers and metrics are
  finite), or status 2 with exactly one line starting `nkmpi: error:` on stderr (one in all
  for 2 ranks), no output file and no traceback; a summary it prints holds no NaN or Inf;
  `status` answers one of its states with that state's status, or status 2 as above;
* never a hang (every launch runs under a time limit) nor a runaway allocation (under an
  address-space limit);
* the inputs' bytes are unchanged, no output replaces an input, and a failed command leaves
  no output nor temporary `.partial` file behind;
* the estimator raises ValueError for bad parameters and arrays, never another exception,
  and otherwise fits finite centers.

Each kind of input has a catalogue of edge cases that hypothesis tries in full (max_examples
is the catalogue's length: every option at every extreme value, every kind of --init file,
every kind of malformed dataset and result) and random draws from a wider space.

The serial commands run through nkmpi.cli.main(argv) in a forked child of the test process:
as fast as a call in the process (nothing is imported again), but a crash of the HDF5 library
on a damaged file, a hang or a runaway allocation fails one example instead of ending the
session.  The estimator runs the same way, on MPI.COMM_SELF of the child.  A few examples
run the real `python -m nkmpi`, and `mpiexec -n R python -m nkmpi run` runs fewer examples.
"""

import hashlib
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import MPI_TIMEOUT, mpi_command, mpi_env, uneven_dataset
from hypothesis import HealthCheck, Phase, assume, given, note, settings
from hypothesis import strategies as st

from nkmpi.cli import main, state_status
from nkmpi.formats import checkpoint
from nkmpi.formats.hdf5 import new_run_id
from nkmpi.formats.result import read_result

#: Seconds one serial command (a forked child, or `python -m nkmpi`) may take before it counts
#: as a hang; they take well under one, but one that is the first to use a kernel for its
#: dtype compiles it (15 s for float32 data's seeding on this project's 2-core machine, twice
#: that when the machine is slow), so the limit is far above what speed alone can explain.
CHILD_SECONDS = MPI_TIMEOUT
#: Seconds one `mpiexec ... nkmpi run` may take; they take a few.
MPI_SECONDS = MPI_TIMEOUT
#: Address space a child may add to what it inherits, and that a launched process may use.
CHILD_HEADROOM = 3 * 2**30
PROCESS_ADDRESS_SPACE = 4 * 2**30

#: A forked child's exit status when the call raised (the traceback is on its stderr),
#: returned something other than a small int, or was killed for taking too long.
RAISED, NOT_A_STATUS, HANG = 101, 102, "hang"

#: No shrinking: a failing example may be a hang, and shrinking it would try many more, each
#: costing the time limit; examples are described by plain data and read well unshrunk.
#: (Without shrinking hypothesis also stops at the first failure of a test.)
SETTINGS = {"deadline": None, "derandomize": True, "database": None,
            "phases": [Phase.explicit, Phase.generate],
            "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                      HealthCheck.data_too_large, HealthCheck.filter_too_much]}

K, N_FEATURES = 3, 3


# ---------------------------------------------------------------------------------------------
# Running things: forked children, subprocesses, and the oracle.

@dataclass
class Outcome:
    status: object          # exit status (int; negative: killed by that signal), or HANG
    stdout: str
    stderr: str

    def describe(self):
        return (f"status {self.status}\n--- stdout ---\n{self.stdout[-3000:]}\n"
                f"--- stderr ---\n{self.stderr[-6000:]}")


def _limit_address_space(limit):
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _address_space_in_use():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def in_child(call, seconds=CHILD_SECONDS):
    """Run call() in a forked child whose stdout and stderr (file descriptors included) go
    to files; its return value is the child's exit status."""
    folder = tempfile.mkdtemp(prefix="nkmpi-fuzz-")
    out_path, err_path = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:                                        # the child: never returns
        status = RAISED
        try:
            for fd, path in ((1, out_path), (2, err_path)):
                target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(target, fd)
                os.close(target)
            # Open until os._exit below, which flushes nothing: flushed there by hand.
            sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
            _limit_address_space(_address_space_in_use() + CHILD_HEADROOM)
            result = call()
            status = result if isinstance(result, int) and 0 <= result < RAISED else NOT_A_STATUS
            if status == NOT_A_STATUS:
                print(f"the call returned {result!r}, not an exit status", file=sys.stderr)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) and 0 <= exc.code < 256 else 1
        except BaseException:  # noqa: BLE001 - whatever it was, the parent sees it on stderr
            traceback.print_exc()
            status = RAISED
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(status)
    status = None
    try:
        deadline = time.monotonic() + seconds
        while status is None:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(wait_status)
            elif time.monotonic() > deadline:
                status = HANG
            else:
                time.sleep(0.003)
        return Outcome(status, Path(out_path).read_text(errors="replace"),
                       Path(err_path).read_text(errors="replace"))
    finally:
        if status is None or status == HANG:      # also when the wait was interrupted
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        shutil.rmtree(folder, ignore_errors=True)


def cli(*argv, seconds=CHILD_SECONDS):
    """`nkmpi ARGV` through nkmpi.cli.main in a forked child."""
    argv = [os.fspath(a) for a in argv]
    return in_child(lambda: main(argv), seconds)


#: Sets the address-space limit, then becomes the command (inherited by what it starts).
LIMITED = ("import os, resource, sys; limit = int(sys.argv[1]); "
           "hard = resource.getrlimit(resource.RLIMIT_AS)[1]; "
           "resource.setrlimit(resource.RLIMIT_AS, (limit if hard < 0 else min(limit, hard), hard)); "
           "os.execvp(sys.argv[2], sys.argv[2:])")


def launch(command, seconds):
    """A subprocess with mpi_env(), an address-space limit and a time limit (HANG when it
    ran out; the whole process group is killed then)."""
    command = [sys.executable, "-c", LIMITED, str(PROCESS_ADDRESS_SPACE), *map(os.fspath, command)]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", env=mpi_env(),
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=seconds)
        return Outcome(proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return Outcome(HANG, out, err)
    finally:
        if proc.poll() is None:             # the wait was interrupted: leave nothing running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def nkmpi_process(*argv):
    """The real command line: `python -m nkmpi ARGV`."""
    return launch([sys.executable, "-m", "nkmpi", *argv], CHILD_SECONDS)


def mpi_run(n_ranks, *argv):
    """`mpiexec -n R python -m nkmpi run ARGV` (oversubscribed on a small machine)."""
    return launch(mpi_command(n_ranks, [sys.executable, "-m", "nkmpi", "run", *argv]), MPI_SECONDS)


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Inputs:
    """The bytes of every input file of a command, taken before it runs."""

    def __init__(self, *paths):
        self.digests = {}
        for path in paths:
            if path is not None and os.path.isfile(path):
                self.digests[os.fspath(path)] = (sha256(path), os.stat(path).st_ino)

    def check_unchanged(self, context):
        for path, (digest, inode) in self.digests.items():
            assert os.path.isfile(path), f"input {path} is gone\n{context}"
            assert sha256(path) == digest, f"input {path} was changed\n{context}"
            assert os.stat(path).st_ino == inode, f"input {path} was replaced by an output\n{context}"


def partial_files(*folders):
    return sorted(str(p) for folder in folders if folder and os.path.isdir(folder)
                  for p in Path(folder).iterdir() if ".partial" in p.name)


def check_result_file(path, context):
    """The oracle's 'valid result': read_result reads it, centers and metrics finite."""
    assert os.path.isfile(path), f"status 0 but no result file {path}\n{context}"
    result = read_result(path)
    centers = result["centers"]
    assert centers.ndim == 3 and np.isfinite(centers).all(), \
        f"the result holds non-finite centers\n{context}"
    assert np.isfinite(result["initial_centers"]).all(), f"non-finite initial centers\n{context}"
    for name, series in result["metrics"].items():
        assert np.isfinite(np.asarray(series, dtype=np.float64)).all(), \
            f"metric {name} is not finite: {series}\n{context}"
    return result


def check_outcome(outcome, what, inputs=None, out=None, out_existed=False, folders=()):
    """The oracle, for any command's outcome; `out` is the result it may write."""
    context = f"{what}\n{outcome.describe()}"
    assert outcome.status != HANG, f"no answer within the time limit (hang)\n{context}"
    assert "Traceback" not in outcome.stderr, f"a traceback\n{context}"
    assert outcome.status in (0, 2), f"exit status is neither 0 nor 2\n{context}"
    errors = [line for line in outcome.stderr.splitlines() if line.startswith("nkmpi: error:")]
    if outcome.status == 2:
        assert len(errors) == 1, f"status 2 needs exactly one 'nkmpi: error:' line\n{context}"
        if out is not None and not out_existed:
            assert not os.path.exists(out), f"a failed command left {out} behind\n{context}"
    else:
        assert not errors, f"status 0 with an error line\n{context}"
        if out is not None:
            check_result_file(out, context)
    if inputs is not None:
        inputs.check_unchanged(context)
    leftovers = partial_files(*folders)
    assert not leftovers, f"temporary files left behind: {leftovers}\n{context}"


def fresh_folder(root, name="case"):
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))


# ---------------------------------------------------------------------------------------------
# Fixtures: one good dataset and one result of it, made before any fork.

class Base(dict):
    """The module's good files (paths and bytes), shown briefly in falsifying examples."""

    def __repr__(self):
        return f"<good dataset and result in {self['data'].parent}>"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A good dataset (12 uneven agents, one without points, 3 features) and a result of it."""
    folder = tmp_path_factory.mktemp("fuzz")
    data = folder / "data.h5"
    uneven_dataset(data, n_agents=12, n_features=N_FEATURES)
    result = folder / "data.result.h5"
    # In this process, so that every numba function the serial commands use is loaded once
    # here and inherited by the forked children.  (Not the MPI kernels: kernels.warm_up
    # would start numba's OpenMP threads, which a forked child may not use.)
    sys.stdout.flush()
    assert main(["simulate", str(data), "-k", str(K), "--iters", "5", "--out", str(result),
                 "--quiet"]) == 0
    other = folder / "other.h5"          # other agents and features, for `summary --data`
    uneven_dataset(other, n_agents=7, n_features=N_FEATURES + 2, seed=3)
    return Base({"data": data, "result": result, "data_bytes": data.read_bytes(),
                 "result_bytes": result.read_bytes(), "other_bytes": other.read_bytes()})


def copy_of(base, key, folder, name):
    path = Path(folder) / name
    path.write_bytes(base[key])
    return path


# ---------------------------------------------------------------------------------------------
# Option values.

#: The values every numeric option is tried with (each pair of option and value, every run).
CORE_NUMBERS = ["0", "-1", "0.5", "1.5", "1e308", "-1e308", "1e-308", "5e-324", "nan", "inf", "-inf",
                str(10**30), str(-10**30), str(2**63), str(2**63 - 1), "abc", ""]
#: More of them, for random draws.
MORE_NUMBERS = ["-0", "1", "2", "3", "-0.5", "1.0", "3.0", "1e999", "-nan", "NaN", "Infinity", " ",
                "1e", "0x10", "1_000", "\u0663", "None", "True", "--", "-", "1,5", "0.999999999999",
                "1.0000000000000002", str(2**64), str(-2**63), str(-2**63 - 1), str(10**400)]
ARG_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")


def number_texts():
    return st.one_of(st.sampled_from(CORE_NUMBERS + MORE_NUMBERS), st.integers().map(str),
                     st.floats().map(repr), st.text(alphabet=ARG_CHARS, max_size=6))


def not_endless(text):
    """False for counts that ask for practically endless work while being valid
    (--n-init and --inner from a thousand up to 2**63 - 1): any answer there is slow.
    Beyond int64 a count cannot be valid: it must be refused, like any other."""
    try:
        value = int(text)
    except ValueError:
        return True
    return not 1000 < value < 2**63


GRAPH_CORE = ["ring", "complete", "star", "torus", "torus:rows=0", "torus:rows=5", "er:p=nan", "er:p=-1",
              "er:p=1e308", "er:p=0", "rgg:radius=nan", "rgg:radius=inf", "rgg:radius=-1",
              "ws:k=-2,p=0.1", "ws:k=4,p=nan", "ws:k=100,p=0.1", f"ws:k={2**63}", f"torus:rows={10**30}",
              "dataset", "file:", "file:/nonexistent/edges.txt", "file:/", "bogus", "", ":", "er:p",
              "ring:x=1"]


def graph_specs():
    params = st.one_of(number_texts(), st.sampled_from(["0.3", "0.9", "4", "2"]))
    return st.one_of(
        st.sampled_from(GRAPH_CORE),
        st.builds(lambda v: f"er:p={v}", params),
        st.builds(lambda v: f"rgg:radius={v}", params),
        st.builds(lambda v: f"torus:rows={v}", params),
        st.builds(lambda k, p: f"ws:k={k},p={p}", params, params),
        st.text(alphabet=ARG_CHARS, max_size=8))


SCHEDULE_CORE = ["1", "1:10", "1:10:0.5", "nan", "inf", "0", "-1", "1e308", "1e-308", "1:1", "1:0.5",
                 "1:inf", "1:nan", "1:10:1", "1:10:-0.1", "1:10:nan", "1e-308:1.0000001",
                 "5e-324:1.000000000001", "1e-300:10", "1:1e308", "1:1:1:1", "::", "1::0.5", "abc", ""]


def rho_schedules():
    part = st.one_of(number_texts(), st.sampled_from(["1", "10", "0.001", "1.0000001", "2"]))
    return st.one_of(st.sampled_from(SCHEDULE_CORE),
                     st.builds(lambda *p: ":".join(p), part),
                     st.builds(lambda *p: ":".join(p), part, part),
                     st.builds(lambda *p: ":".join(p), part, part, part))


INIT_CORE = ["network", "flood", "local", "bogus", "", "file:", "file:/nonexistent", "NETWORK", "file:/"]
ALGORITHM_CORE = ["nkmeans", "lloyd", "LLOYD", "", "kmeans"]
NUMERIC_OPTIONS = ["-k", "--seed", "--iters", "--monitor-every", "--alpha", "--rho", "--coupling", "--tol",
                   "--link-failure-prob", "--dropout-prob", "--n-init", "--inner"]
#: Every option of `simulate` and `run` with its core values: all these pairs are tried
#: (-k beyond the data's 220 distinct points too).
CORE_PAIRS = sorted(
    [(name, value) for name in NUMERIC_OPTIONS for value in CORE_NUMBERS
     if name not in ("--n-init", "--inner") or not_endless(value)]
    + [("-k", value) for value in ("12", "220", "221", "1000")]
    + [("--rho-schedule", v) for v in SCHEDULE_CORE] + [("--graph", v) for v in GRAPH_CORE]
    + [("--init", v) for v in INIT_CORE] + [("--algorithm", v) for v in ALGORITHM_CORE])

#: Options of `simulate` and `run`, and what to feed them at random.
COMMON_OPTIONS = {
    **{name: number_texts() for name in NUMERIC_OPTIONS},
    "--n-init": number_texts().filter(not_endless), "--inner": number_texts().filter(not_endless),
    "--rho-schedule": rho_schedules(), "--graph": graph_specs(),
    "--init": st.sampled_from(INIT_CORE), "--algorithm": st.sampled_from(ALGORITHM_CORE),
}
RUN_OPTIONS = {**COMMON_OPTIONS, "--threads": number_texts(), "--checkpoint-every": number_texts()}

#: Iterations of a run whose --iters is not fuzzed: short, whatever --tol and --monitor-every say.
SHORT = 3


def one_option(options):
    return st.sampled_from(sorted(options)).flatmap(lambda name: st.tuples(st.just(name), options[name]))


def option_argv(pairs):
    """Values that start with '-' go as NAME=VALUE, so that argparse takes them as values."""
    argv = []
    for name, value in pairs:
        argv += [f"{name}={value}"] if value.startswith("-") else [name, value]
    return argv


def with_defaults(pairs, iters=SHORT):
    """The fuzzed options, plus -k and --iters unless they are fuzzed."""
    names = {name for name, _ in pairs}
    argv = option_argv(pairs)
    if "-k" not in names:
        argv += ["-k", str(K)]
    if "--iters" not in names:
        argv += ["--iters", str(iters)]
    return argv


# ---------------------------------------------------------------------------------------------
# Arrays and files, described by plain data (so that a falsifying example reads well).

DELETE = "<delete>"                  # the attribute or dataset is removed
GROUP, DANGLING, EXTERNAL, TEXT = "<group>", "<dangling link>", "<external link>", "<text>"
FLOAT_SPECIALS = [0.0, -0.0, 1.0, -1.0, 3.5, 1e200, -1e200, 1e308, 1.7976931348623157e308, 5e-324,
                  math.nan, math.inf, -math.inf, 1e19, 3.4e38, 1e-300]


def make_array(spec):
    """spec = (shape, dtype, special, fill): a ramp (distinct rows), the ramp with `special`
    in its middle ('one'), or `special` everywhere ('constant'), as `dtype`."""
    shape, dtype, special, fill = spec
    size = int(np.prod(shape, dtype=np.int64))
    values = np.arange(size, dtype=np.float64) - size // 2
    if fill == "constant":
        values[:] = special
    elif fill == "one" and size:
        values[size // 2] = special
    values = values.reshape(shape)
    kind = np.dtype(dtype).kind
    with np.errstate(all="ignore"):
        if kind in "iub":
            values = np.nan_to_num(values, nan=0, posinf=7, neginf=-7).clip(-100, 100)
        if kind == "S":
            values = values.astype(str)
        return values.astype(dtype)


def array_specs(shapes, dtypes, specials=FLOAT_SPECIALS):
    return st.tuples(st.sampled_from(shapes), st.sampled_from(dtypes), st.sampled_from(specials),
                     st.sampled_from(["ramp", "one", "constant"]))


INIT_SHAPES = [(K, N_FEATURES), (K, N_FEATURES + 1), (K, 1), (K - 1, N_FEATURES), (K + 1, N_FEATURES),
               (N_FEATURES,), (), (0, N_FEATURES), (K, 0), (K, N_FEATURES, 1), (1, K, N_FEATURES)]
INIT_DTYPES = ["<f8", "<f4", "<f2", ">f8", "<i8", "<i1", "<u8", "?", "<c16", "S4"]
INIT_KINDS = ["npy", "h5", "npy-truncated", "npy-object", "npz", "h5-group", "h5-dangling", "h5-external",
              "h5-none", "h5-strings", "bytes", "folder", "missing"]
GOOD_CENTERS = ((K, N_FEATURES), "<f8", 0.0, "ramp")


def write_init_file(folder, spec):
    """Write one --init candidate, spec = (kind, array spec, suffix, bytes, cut), and
    return its path (which for some kinds names no file, or a folder)."""
    kind, array_spec, suffix, blob, cut = spec
    path = Path(folder) / f"init{suffix}"
    array = make_array(array_spec)
    if kind in ("npy", "npy-truncated"):
        with open(path, "wb") as f:
            np.save(f, array)
        if kind == "npy-truncated":
            data = path.read_bytes()
            path.write_bytes(data[:int(cut * len(data))])
    elif kind == "npy-object":
        with open(path, "wb") as f:
            np.save(f, np.array([[1.0, "a", None]] * K, dtype=object), allow_pickle=True)
    elif kind == "npz":
        with open(path, "wb") as f:
            np.savez(f, centers=array)
    elif kind.startswith("h5"):
        with h5py.File(path, "w") as f:
            if kind == "h5":
                f["centers"] = array
            elif kind == "h5-group":
                f.create_group("centers")
            elif kind == "h5-dangling":
                f["centers"] = h5py.SoftLink("/nowhere")
            elif kind == "h5-external":
                f["centers"] = h5py.ExternalLink(str(Path(folder) / "missing.h5"), "/centers")
            elif kind == "h5-none":
                f["other"] = array
            elif kind == "h5-strings":
                f.create_dataset("centers", data=np.array([["a"] * N_FEATURES] * K, dtype=object),
                                 dtype=h5py.string_dtype())
    elif kind == "bytes":
        path.write_bytes(blob)
    elif kind == "folder":
        path.mkdir()
    return path


#: Every kind of file; every dtype and shape; every special value in good-shaped centers.
INIT_CORE_CASES = (
    [(kind, GOOD_CENTERS, ".npy" if "npy" in kind else ".h5", b"", 0.5) for kind in INIT_KINDS]
    + [(kind, (shape, "<f8", 0.0, "ramp"), suffix, b"", 0.5)
       for kind, suffix in (("npy", ".npy"), ("h5", ".h5")) for shape in INIT_SHAPES[1:]]
    + [("npy", ((K, N_FEATURES), dtype, 0.0, "ramp"), ".npy", b"", 0.5) for dtype in INIT_DTYPES[1:]]
    + [(kind, ((K, N_FEATURES), "<f8", special, fill), suffix, b"", 0.5)
       for kind, suffix in (("npy", ".npy"), ("h5", ".h5")) for special in FLOAT_SPECIALS[5:]
       for fill in ("one", "constant")]
    + [("bytes", GOOD_CENTERS, suffix, blob, 0.5) for suffix in (".npy", ".h5", ".txt")
       for blob in (b"", b"\x93NUMPY", b"\x89HDF\r\n\x1a\n" + b"\0" * 40, b"1 2 3\n4 5 6\n7 8 9\n")])


def init_files():
    return st.tuples(st.sampled_from(INIT_KINDS), array_specs(INIT_SHAPES, INIT_DTYPES),
                     st.sampled_from([".npy", ".h5", ".txt", "", ".NPY", ".npy.h5"]),
                     st.binary(max_size=300), st.floats(0, 1))


#: Attribute values of random types and shapes, for `format`, `version` and others.
ATTRIBUTE_SPECIALS = [
    DELETE, "nkmpi-dataset", b"nkmpi-dataset", "nkmpi-result", "", "NKMPI-DATASET", 1, 0, 2, -1, 1.0,
    1.5, True, "1", b"1", np.uint64(2**64 - 1), math.nan, math.inf, ("vlen", ["nkmpi-dataset"]),
    ("vlen", ["nkmpi-dataset", "nkmpi-dataset"]), ("array", [b"nkmpi-dataset"]), ("array", [1]),
    ("array", [1, 1]), ("array", []), ("array", [[1]]), ("array", [1.0, math.nan]), b"\xff\xfe",
    "\u00e9t\u00e9"]


def attribute_value(value):
    """The value to store for an ATTRIBUTE_SPECIALS entry (arrays are described by tuples)."""
    if isinstance(value, tuple) and value[0] == "vlen":
        return np.array(value[1], dtype=h5py.string_dtype())
    if isinstance(value, tuple) and value[0] == "array":
        return np.array(value[1], dtype=np.int64 if value[1] == [] else None)
    if isinstance(value, tuple):                                 # an array spec
        return make_array(value)
    return value


def attribute_values():
    return st.one_of(st.sampled_from(ATTRIBUTE_SPECIALS),
                     array_specs([(), (1,), (2,), (0,), (2, 2)], ["<i8", "<u8", "<f8", "<f2", "?", "S13", "<c8"]),
                     st.integers(-2**63, 2**63 - 1), st.floats(), st.text(alphabet=ARG_CHARS, max_size=8))


def apply_edit(f, edit):
    """One edit of an open HDF5 file, described as a tuple:

    ("attr", name, value)           set (or with DELETE remove) a root attribute;
    ("replace", name, value)        replace a dataset by an array spec, GROUP, DANGLING,
                                    EXTERNAL, TEXT, or remove it (DELETE);
    ("offsets", list)               agent_offsets := list (uint64 when int64 cannot hold it);
    ("offsets-at", index, value)    agent_offsets[index] := value;
    ("edges", list, dtype)          graph/edges := list of pairs;
    ("scale", factor, dtype, one)   points *= factor (all rows, or only one), stored as dtype;
    """
    what = edit[0]
    if what == "attr":
        _, name, value = edit
        if value == DELETE if isinstance(value, str) else False:
            if name in f.attrs:
                del f.attrs[name]
        else:
            f.attrs[name] = attribute_value(value)
    elif what == "replace":
        _, name, value = edit
        if name in f:
            del f[name]
        if isinstance(value, str):
            if value == GROUP:
                f.create_group(name)
            elif value == DANGLING:
                f[name] = h5py.SoftLink("/nowhere")
            elif value == EXTERNAL:
                f[name] = h5py.ExternalLink("missing-file.h5", "/points")
            elif value == TEXT:
                f[name] = "text"
        else:
            f[name] = make_array(value)
    elif what in ("offsets", "offsets-at"):
        offsets = [int(v) for v in f["agent_offsets"][()]]
        if what == "offsets":
            offsets = list(edit[1])
        else:
            offsets[edit[1] % len(offsets)] = edit[2]
        del f["agent_offsets"]
        try:
            f["agent_offsets"] = np.array(offsets, dtype=np.int64)
        except OverflowError:
            f["agent_offsets"] = np.array(offsets, dtype=np.uint64)
    elif what == "edges":
        _, edges, dtype = edit
        if "graph" in f:
            del f["graph"]
        f.create_dataset("graph/edges", data=np.array(edges, dtype=dtype).reshape(-1, 2))
    elif what == "scale":
        _, factor, dtype, only_one = edit
        points = f["points"][()].astype(np.float64)
        with np.errstate(over="ignore", under="ignore"):
            if only_one:
                points[len(points) // 2] *= factor
            else:
                points *= factor
            del f["points"]
            f["points"] = points.astype(dtype)


N_POINTS = 220                      # rows of the good dataset (12 agents)
DATASET_NAMES = ["points", "agent_offsets", "labels", "graph/edges", "graph"]
DATASET_SHAPES = [(), (0,), (5,), (13,), (N_POINTS,), (N_POINTS, N_FEATURES), (N_POINTS, 1), (N_POINTS, 0),
                  (0, N_FEATURES), (13, 1), (2, 13), (N_POINTS, N_FEATURES, 1), (12,), (N_POINTS, 2)]
DATASET_DTYPES = ["<f8", "<f4", "<f2", "<i8", "<i4", "<u8", "<i1", "?", "<c16", "S3", ">f8", ">i8"]
OFFSET_VALUES = [-1, 0, 1, 219, 220, 221, 2**31, 2**62, 2**63 - 1, 2**64 - 1, -2**63]
OFFSET_LISTS = [[0], [0, 220], [0] * 12 + [220], [0] + [220] * 12, [220, 0], [0, 2**63 - 1],
                [0, 2**64 - 1]]
EDGE_LISTS = [([[0, 2**62], [1, 2]], "<i8"), ([[0, 2**64 - 1]], "<u8"), ([], "<i8"),
              ([[0, 1]] * 3, "<u1"), ([[-1, 0]], "<i8"), ([[0, 12]], "<i4")]
HUGE_FACTORS = [1e15, 1e19, 2e19, 1e30, 1e37, 1e150, 1e153, 1e154, 1e155, 1e160, 1e200, 1e300, 1e307,
                1e-300, 1e-320]

#: Every attribute special as `format` and `version`; every dataset removed, turned into a
#: group, a dangling or external link, text, or wrongly shaped and typed; offsets and edges
#: at the edges of their ranges.
DATASET_CORE_EDITS = (
    [("attr", name, value) for name in ("format", "version") for value in ATTRIBUTE_SPECIALS]
    + [("replace", name, value) for name in DATASET_NAMES
       for value in (DELETE, GROUP, DANGLING, EXTERNAL, TEXT, ((N_POINTS,), "<f8", 0.0, "ramp"),
                     ((N_POINTS, N_FEATURES), "<i8", 0.0, "ramp"), ((13, 2), "<f8", 0.0, "ramp"))]
    + [("offsets-at", index, value) for index in (0, -1) for value in OFFSET_VALUES]
    + [("offsets", values) for values in OFFSET_LISTS]
    + [("edges", edges, dtype) for edges, dtype in EDGE_LISTS])


def dataset_edits():
    return st.one_of(
        st.tuples(st.just("attr"), st.sampled_from(["format", "version"]), attribute_values()),
        st.tuples(st.just("replace"), st.sampled_from(DATASET_NAMES),
                  st.one_of(array_specs(DATASET_SHAPES, DATASET_DTYPES),
                            st.sampled_from([DELETE, GROUP, DANGLING, EXTERNAL, TEXT]))),
        st.tuples(st.just("offsets-at"), st.integers(0, 12), st.sampled_from(OFFSET_VALUES)),
        st.tuples(st.just("offsets"), st.sampled_from(OFFSET_LISTS)),
        st.tuples(st.just("edges"), st.lists(st.tuples(st.integers(-3, 14), st.integers(-3, 14)), max_size=15),
                  st.sampled_from(["<i8", "<u1", "<i4"])),
        st.tuples(st.just("scale"), st.sampled_from(HUGE_FACTORS), st.sampled_from(["<f8", "<f4"]),
                  st.booleans()))


def damage_bytes(data, positions, values, cut):
    """Bytes of a file overwritten at some positions (fractions of its length), then truncated
    at `cut` (a fraction) unless it is None."""
    data = bytearray(data)
    for position, value in zip(positions, values):
        data[min(int(position * len(data)), len(data) - 1)] = value
    if cut is not None:
        data = data[:int(cut * len(data))]
    return bytes(data)


def byte_damage():
    return st.tuples(st.lists(st.floats(0, 1, exclude_max=True), max_size=8),
                     st.lists(st.integers(0, 255), min_size=8, max_size=8),
                     st.one_of(st.none(), st.floats(0, 1, exclude_max=True)))


def edited_copy(source_bytes, path, edits, damage=None):
    """A copy of a good file with HDF5-level edits, then its bytes damaged.

    The length fields of the global heap, where HDF5 keeps variable-length strings, are not
    damaged on purpose: HDF5 2.0 (h5py 3.16) then spins forever reading an attribute such
    as `format` (a length of 164 for the string's object is enough), inside the library,
    where nkmpi cannot bound it.  Random byte damage may still land there.
    """
    path = Path(path)
    path.write_bytes(source_bytes)
    if edits:
        with h5py.File(path, "r+") as f:
            for edit in edits:
                try:
                    apply_edit(f, edit)
                except (TypeError, ValueError, KeyError, OverflowError, OSError, RuntimeError) as exc:
                    note(f"rejected (h5py cannot make it): {edit!r}: {exc!r}")
                    assume(False)
    if damage is not None:
        path.write_bytes(damage_bytes(path.read_bytes(), *damage))
    return path


def damaged_dataset(base, folder, edits, damage=None):
    return edited_copy(base["data_bytes"], Path(folder) / "data.h5", edits, damage)


# ---------------------------------------------------------------------------------------------
# Serial commands, in forked children.

def check_simulate_option(base, tmp_path, option):
    folder = fresh_folder(tmp_path)
    out = folder / "out.h5"
    argv = ["simulate", base["data"], *with_defaults([option], iters=30), "--out", out, "--quiet"]
    inputs = Inputs(base["data"])
    check_outcome(cli(*argv), argv, inputs, out, folders=[folder, base["data"].parent])


@settings(max_examples=len(CORE_PAIRS), **SETTINGS)
@given(option=st.sampled_from(CORE_PAIRS))
def test_simulate_with_each_option_at_each_extreme(base, tmp_path, option):
    """Every option at zero, negative, tiny, huge (1e308, 10**30, 2**63), NaN, Inf and
    non-numeric values (max_examples lets hypothesis try every pair)."""
    check_simulate_option(base, tmp_path, option)


@settings(max_examples=60, **SETTINGS)
@given(option=one_option(COMMON_OPTIONS))
def test_simulate_with_one_random_option(base, tmp_path, option):
    check_simulate_option(base, tmp_path, option)


@settings(max_examples=60, **SETTINGS)
@given(options=st.lists(one_option(COMMON_OPTIONS), min_size=2, max_size=4,
                        unique_by=lambda o: o[0]).filter(lambda o: "--iters" not in dict(o)))
def test_simulate_with_several_options(base, tmp_path, options):
    folder = fresh_folder(tmp_path)
    out = folder / "out.h5"
    argv = ["simulate", base["data"], *with_defaults(options), "--out", out, "--quiet"]
    inputs = Inputs(base["data"])
    check_outcome(cli(*argv), argv, inputs, out, folders=[folder, base["data"].parent])


def check_init_file(base, tmp_path, init, algorithm):
    folder = fresh_folder(tmp_path)
    path = write_init_file(folder, init)
    out = folder / "out.h5"
    argv = ["simulate", base["data"], "-k", str(K), "--init", f"file:{path}", "--iters", "5",
            "--algorithm", algorithm, "--out", out]
    inputs = Inputs(base["data"], path)
    check_outcome(cli(*argv), (init, argv), inputs, out, folders=[folder, base["data"].parent])


@settings(max_examples=len(INIT_CORE_CASES), **SETTINGS)
@given(init=st.sampled_from(INIT_CORE_CASES))
def test_simulate_with_each_kind_of_init_file(base, tmp_path, init):
    """--init file:PATH holding text, garbage, a truncated array, pickles, groups, links,
    every dtype and shape, NaN, Inf and huge centers (every case, NK-means)."""
    check_init_file(base, tmp_path, init, "nkmeans")


@settings(max_examples=50, **SETTINGS)
@given(init=init_files(), algorithm=st.sampled_from(["nkmeans", "lloyd"]))
def test_simulate_with_random_init_files(base, tmp_path, init, algorithm):
    check_init_file(base, tmp_path, init, algorithm)


OUTPUT_KINDS = ["long-name", "name-255", "long-path", "missing-folder", "read-only-folder", "a-folder",
                "below-a-file", "the-dataset", "the-init-file", "symlink-to-dataset",
                "hardlink-to-dataset", "dangling-symlink", "existing-file", "trailing-slash", "text"]


def output_path(kind, text, folder, data, init):
    """An --out value of the given kind: too long, in missing or read-only folders, a folder,
    an input or a link to one, below a file, or a name of random text."""
    if kind == "long-name":
        return folder / ("r" * 300 + ".h5")
    if kind == "name-255":
        return folder / ("r" * 252 + ".h5")
    if kind == "long-path":
        return folder / "/".join(["d" * 200] * 25) / "r.h5"
    if kind == "missing-folder":
        return folder / "missing" / "r.h5"
    if kind == "read-only-folder":
        locked = folder / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        return locked / "r.h5"
    if kind == "a-folder":
        (folder / "dir.h5").mkdir()
        return folder / "dir.h5"
    if kind == "below-a-file":
        return data / "r.h5"
    if kind == "the-dataset":
        return data
    if kind == "the-init-file":
        return init
    if kind == "symlink-to-dataset":
        (folder / "link.h5").symlink_to(data)
        return folder / "link.h5"
    if kind == "hardlink-to-dataset":
        os.link(data, folder / "hard.h5")
        return folder / "hard.h5"
    if kind == "dangling-symlink":
        (folder / "dangling.h5").symlink_to(folder / "nowhere" / "x.h5")
        return folder / "dangling.h5"
    if kind == "existing-file":
        (folder / "old.h5").write_text("an old file, not an input\n")
        return folder / "old.h5"
    if kind == "trailing-slash":
        return str(folder / "r.h5") + "/"
    return folder / text


def check_output_name(base, tmp_path, kind, text):
    folder = fresh_folder(tmp_path)
    data = copy_of(base, "data_bytes", folder, "data.h5")
    init = folder / "init.npy"
    np.save(init, make_array(GOOD_CENTERS))
    try:
        out = output_path(kind, text, folder, data, init)
        existed = os.path.lexists(out)
        argv = ["simulate", data, "-k", str(K), "--init", f"file:{init}", "--iters", "3", "--out", out]
        inputs = Inputs(data, init)
        outcome = cli(*argv)
        check_outcome(outcome, (kind, argv), inputs, None, folders=[folder, out_folder(out)])
        if outcome.status == 0:
            check_result_file(out, outcome.describe())
        elif not existed:
            assert not os.path.lexists(out), f"a failed command left {out}\n{outcome.describe()}"
    finally:
        for locked in folder.glob("locked"):
            locked.chmod(0o755)


@settings(max_examples=len(OUTPUT_KINDS), **SETTINGS)
@given(kind=st.sampled_from(OUTPUT_KINDS))
def test_simulate_each_kind_of_output_name(base, tmp_path, kind):
    """--out names too long, in missing or read-only folders, naming an input (through links
    too): a valid result under that name, or status 2 and the inputs untouched."""
    check_output_name(base, tmp_path, kind, "x.h5")


@settings(max_examples=15, **SETTINGS)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"),
                    min_size=1, max_size=12).filter(lambda t: t not in (".", "..")))
def test_simulate_output_names_of_random_text(base, tmp_path, text):
    check_output_name(base, tmp_path, "text", text)


def out_folder(out):
    folder = os.path.dirname(os.path.abspath(out))
    return folder if os.path.isdir(folder) else None


def check_damaged_dataset(base, tmp_path, edits, damage, graph):
    folder = fresh_folder(tmp_path)
    data = damaged_dataset(base, folder, edits, damage)
    graph_args = [] if graph is None else ["--graph", graph]
    inputs = Inputs(data)
    argv = ["info", data, *graph_args]
    check_outcome(cli(*argv), (edits, damage, argv), inputs, folders=[folder])
    out = folder / "out.h5"
    argv = ["simulate", data, "-k", str(K), "--iters", "5", *graph_args, "--out", out]
    check_outcome(cli(*argv), (edits, damage, argv), inputs, out, folders=[folder])


@settings(max_examples=len(DATASET_CORE_EDITS), **SETTINGS)
@given(edit=st.sampled_from(DATASET_CORE_EDITS))
def test_info_and_simulate_on_each_kind_of_malformed_dataset(base, tmp_path, edit):
    """Attributes of other types and shapes (an array where a string is expected for
    `format`, a string for `version`, ...), datasets missing, linked nowhere, of wrong
    shapes and dtypes, offsets and edges out of range (every case)."""
    check_damaged_dataset(base, tmp_path, [edit], None, None)


@settings(max_examples=100, **SETTINGS)
@given(edits=st.lists(dataset_edits(), max_size=2), damage=st.one_of(st.none(), byte_damage()),
       graph=st.sampled_from([None, "ring", "dataset"]))
def test_info_and_simulate_on_damaged_datasets(base, tmp_path, edits, damage, graph):
    """Random edits as above, and bytes overwritten at random offsets or the file truncated."""
    check_damaged_dataset(base, tmp_path, edits, damage, graph)


@settings(max_examples=2 * 2 * len(HUGE_FACTORS), **SETTINGS)
@given(factor=st.sampled_from(HUGE_FACTORS), dtype=st.sampled_from(["<f8", "<f4"]),
       only_one=st.booleans(), init=st.sampled_from(["network", "flood", "local", "file"]),
       algorithm=st.sampled_from(["nkmeans", "lloyd"]))
def test_simulate_where_squared_distances_overflow(base, tmp_path, factor, dtype, only_one, init,
                                                   algorithm):
    """Coordinates up to 1e307 (a squared distance overflows beyond 1e154 in float64 and
    1.8e19 in float32), in one row or all: a clear error or a finite result, never NaN."""
    folder = fresh_folder(tmp_path)
    data = damaged_dataset(base, folder, [("scale", factor, dtype, only_one)])
    if init == "file":
        np.save(folder / "init.npy", np.array([[1e200, 0, 0], [0, 1e200, 0], [0, 0, -1e200]]))
        init = f"file:{folder / 'init.npy'}"
    if algorithm == "lloyd" and init == "local":
        init = "flood"
    out = folder / "out.h5"
    argv = ["simulate", data, "-k", str(K), "--iters", "10", "--init", init, "--algorithm", algorithm,
            "--out", out]
    check_outcome(cli(*argv), argv, Inputs(data), out, folders=[folder])


#: What the result's `data` attribute (the dataset summary reads by default) may name.
DATA_NAMES = ["data.h5", "other.h5", "text.h5", "missing.h5", "result.h5", "."]
RESULT_NAMES = ["centers", "initial_centers", "assignments", "metrics", "metrics/objective",
                "metrics/edge_disagreement", "metrics/iteration", "metrics/sse"]
RESULT_SHAPES = [(), (0,), (1,), (3,), (12, K, N_FEATURES), (12, K, N_FEATURES + 2), (1, K, N_FEATURES),
                 (0, K, N_FEATURES), (12, 0, N_FEATURES), (N_POINTS,), (12, K)]
RESULT_ATTRIBUTES = ["format", "version", "iterations", "converged", "n_agents", "n_clusters", "data"]

#: Every array of a result removed, linked nowhere, text, wrongly shaped, NaN; every
#: attribute summary reads as another type; the `data` attribute naming other files.
SUMMARY_CORE_CASES = (
    [(("replace", name, value),) for name in RESULT_NAMES
     for value in (DELETE, GROUP, DANGLING, TEXT, ((0,), "<f8", 0.0, "ramp"),
                   ((12, K, N_FEATURES), "<f8", math.nan, "one"), ((12, K, N_FEATURES + 2), "<f8", 0.0, "ramp"),
                   ((N_POINTS,), "S3", 0.0, "ramp"), ((1,), "<f8", math.nan, "constant"),
                   ((1,), "<f8", math.inf, "constant"))]
    + [(("attr", name, value),) for name in RESULT_ATTRIBUTES
       for value in (DELETE, "", 1, math.nan, ("array", [1, 1]), ("vlen", ["nkmpi-result", "x"]))]
    + [(("data", name),) for name in DATA_NAMES])


def result_edits():
    return st.one_of(
        st.tuples(st.just("replace"), st.sampled_from(RESULT_NAMES),
                  st.one_of(array_specs(RESULT_SHAPES, ["<f8", "<f4", "<i8", "?", "S3", "<c16"]),
                            st.sampled_from([DELETE, GROUP, DANGLING, TEXT]))),
        st.tuples(st.just("attr"), st.sampled_from(RESULT_ATTRIBUTES), attribute_values()),
        st.tuples(st.just("data"), st.sampled_from(DATA_NAMES)))


def check_summary(base, tmp_path, edits, damage, data_option):
    folder = fresh_folder(tmp_path)
    copy_of(base, "data_bytes", folder, "data.h5")
    copy_of(base, "other_bytes", folder, "other.h5")
    (folder / "text.h5").write_text("not a dataset\n")
    in_folder = [("attr", "data", str(folder / edit[1])) if edit[0] == "data" else edit for edit in edits]
    result = edited_copy(base["result_bytes"], folder / "result.h5",
                         [("attr", "data", str(folder / "data.h5"))] + in_folder, damage)
    argv = ["summary", result] + ([] if data_option is None else ["--data", folder / data_option])
    inputs = Inputs(*folder.iterdir())
    outcome = cli(*argv)
    check_outcome(outcome, (edits, damage, argv), inputs, folders=[folder])
    if outcome.status == 0:
        words = set(outcome.stdout.lower().replace(",", " ").replace("(", " ").replace(")", " ").split())
        assert not {"nan", "inf", "-inf"} & words, \
            f"summary printed non-finite numbers for a result it accepted\n{argv}\n{outcome.describe()}"


@settings(max_examples=len(SUMMARY_CORE_CASES), **SETTINGS)
@given(edits=st.sampled_from(SUMMARY_CORE_CASES))
def test_summary_on_each_kind_of_malformed_result(base, tmp_path, edits):
    check_summary(base, tmp_path, edits, None, None)


@settings(max_examples=100, **SETTINGS)
@given(edits=st.lists(result_edits(), max_size=3), damage=st.one_of(st.none(), st.none(), byte_damage()),
       data_option=st.sampled_from([None, None, None] + DATA_NAMES))
def test_summary_on_malformed_results(base, tmp_path, edits, damage, data_option):
    """`summary` on results with arrays missing, reshaped or retyped, attributes of any type,
    a `data` attribute naming other files, damaged bytes, and --data naming other files.
    A summary it prints must not hold NaN or Inf."""
    check_summary(base, tmp_path, edits, damage, data_option)


@pytest.fixture(scope="module")
def run_files(base):
    """The good result, and a checkpoint of its run marked interrupted."""
    result = read_result(base["result"])
    attrs = {key: value for key, value in result["attrs"].items()
             if key not in ("format", "version", "nkmpi_version")}
    path = base["result"].with_name("data.checkpoint.h5")
    checkpoint.write_checkpoint(path, None, run_id=new_run_id(), n_agents=len(result["centers"]),
                                n_points=N_POINTS, agent_start=0, centers=result["centers"],
                                initial_centers=result["initial_centers"], row_start=0,
                                labels=result["assignments"].astype(np.int32), metrics=result["metrics"],
                                attrs=dict(attrs, iteration=3, rho_stage=0), interrupted=True)
    return {"result": base["result"], "checkpoint": path}


STATE_ATTRIBUTES = ["format", "version", "iteration", "iterations", "interrupted"]
#: Every attribute `status` reads, of each file, removed or of every special value.
STATUS_CORE_CASES = [(kind, (("attr", name, value),)) for kind in ("checkpoint", "result")
                     for name in STATE_ATTRIBUTES for value in ATTRIBUTE_SPECIALS]


def check_status(run_files, tmp_path, kind, edits, damage):
    folder = fresh_folder(tmp_path)
    path = edited_copy(run_files[kind].read_bytes(), folder / f"{kind}.h5", list(edits), damage)
    inputs = Inputs(path)
    outcome = cli("status", path)
    if outcome.status in state_status().values():
        context = f"{(kind, edits, damage)}\n{outcome.describe()}"
        state, _, iteration = outcome.stdout.partition(" ")
        assert state_status().get(state) == outcome.status and iteration.strip().isdigit(), context
        assert int(iteration) >= 1 and outcome.stdout.count("\n") == 1 and not outcome.stderr, context
        inputs.check_unchanged(context)
    else:
        check_outcome(outcome, (kind, edits, damage), inputs, folders=[folder])


@settings(max_examples=len(STATUS_CORE_CASES), **SETTINGS)
@given(case=st.sampled_from(STATUS_CORE_CASES))
def test_status_on_each_kind_of_malformed_file(run_files, tmp_path, case):
    check_status(run_files, tmp_path, *case, None)


@settings(max_examples=100, **SETTINGS)
@given(kind=st.sampled_from(["checkpoint", "result"]),
       edits=st.lists(st.tuples(st.just("attr"), st.sampled_from(STATE_ATTRIBUTES), attribute_values()),
                      max_size=3),
       damage=st.one_of(st.none(), byte_damage()))
def test_status_on_malformed_files(run_files, tmp_path, kind, edits, damage):
    """`status` on a checkpoint or result whose attributes are of any type, or whose bytes are
    damaged: one of its answers, or one error line and status 2."""
    check_status(run_files, tmp_path, kind, edits, damage)


# ---------------------------------------------------------------------------------------------
# The real command line, as a process.

@settings(max_examples=4, **SETTINGS)
@given(command=st.sampled_from(["info", "simulate", "summary"]), option=one_option(COMMON_OPTIONS),
       damage=st.one_of(st.none(), byte_damage()))
def test_serial_commands_as_processes(base, tmp_path, command, option, damage):
    """The same oracle through the real entry point, `python -m nkmpi` (a few examples)."""
    folder = fresh_folder(tmp_path)
    data = damaged_dataset(base, folder, [], damage)
    result = edited_copy(base["result_bytes"], folder / "result.h5", [("attr", "data", str(data))])
    out = folder / "out.h5"
    argv = {"info": ["info", data, f"--graph={option[1]}"],
            "simulate": ["simulate", data, *with_defaults([option]), "--out", out],
            "summary": ["summary", result, "--data", data]}[command]
    inputs = Inputs(data, result)
    check_outcome(nkmpi_process(*argv), argv, inputs, out if command == "simulate" else None,
                  folders=[folder])


# ---------------------------------------------------------------------------------------------
# `nkmpi run` under mpiexec, on 1 and 2 ranks.

RUN_OUTPUT_KINDS = ["checkpoint-is-data", "checkpoint-is-out", "out-is-data", "resume-garbage",
                    "resume-result", "resume-data", "resume-folder", "long-out", "missing-folder"]


def run_case_argv(case, base, folder):
    """(argv after `run`, input files, result file or None) for a case of run_cases()."""
    data = folder / "data.h5"
    out = folder / "out.h5"
    kind = case[0]
    if kind == "dataset":
        damaged_dataset(base, folder, case[1], case[2])
    else:
        data.write_bytes(base["data_bytes"])
    if kind == "option":
        return [data, *with_defaults([case[1]]), "--out", out], [data], out
    if kind == "init":
        path = write_init_file(folder, case[1])
        return [data, "-k", str(K), "--init", f"file:{path}", "--iters", str(SHORT), "--out", out], \
            [data, path], out
    if kind == "dataset":
        return [data, "-k", str(K), "--iters", str(SHORT), "--out", out], [data], out
    garbage = folder / "garbage.h5"
    garbage.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 4)
    result = copy_of(base, "result_bytes", folder, "result.h5")
    extra = {"checkpoint-is-data": ["--checkpoint", data], "checkpoint-is-out": ["--checkpoint", out],
             "out-is-data": ["--out", data], "resume-garbage": ["--resume", garbage],
             "resume-result": ["--resume", result], "resume-data": ["--resume", data],
             "resume-folder": ["--resume", folder], "long-out": ["--out", folder / ("r" * 300 + ".h5")],
             "missing-folder": ["--out", folder / "missing" / "r.h5"]}[case[1]]
    argv = [data, "-k", str(K), "--iters", str(SHORT)] + extra
    if "--out" in extra:
        return argv, [data, garbage, result], None
    return argv + ["--out", out], [data, garbage, result], out


def run_cases():
    kinds = {
        "option": st.one_of(st.sampled_from(CORE_PAIRS), one_option(RUN_OPTIONS)),
        "init": st.one_of(st.sampled_from(INIT_CORE_CASES), init_files()),
        "dataset": st.tuples(st.lists(dataset_edits(), min_size=1, max_size=2), st.none()),
        "damage": st.tuples(st.just([]), byte_damage()),
        "outputs": st.sampled_from(RUN_OUTPUT_KINDS)}
    return st.sampled_from(sorted(kinds)).flatmap(
        lambda kind: kinds[kind].map(lambda value: ("dataset", *value) if kind in ("dataset", "damage")
                                     else (kind, value)))


#: One case of each kind of bad input, each on the rank count where it matters most
#: (a row only one rank reads, a check every rank must agree on).
MPI_CORE_CASES = [
    (("option", ("--seed", str(2**63))), 2),
    (("option", ("--coupling", "1e-308")), 2),
    (("option", ("--rho-schedule", "1e-308")), 1),
    (("option", ("-k", "221")), 2),
    (("option", ("--threads", "0")), 2),
    (("option", ("--threads", str(10**30))), 1),
    (("option", ("--checkpoint-every", "-1")), 2),
    (("init", ("npy", ((K, N_FEATURES), "<f8", 1e200, "constant"), ".npy", b"", 0.5)), 2),
    (("init", ("npy-truncated", GOOD_CENTERS, ".npy", b"", 0.5)), 2),
    (("dataset", [("scale", 1e200, "<f8", True)], None), 2),
    (("dataset", [("attr", "version", ("array", [1, 1]))], None), 2),
    (("dataset", [], ([0.3, 0.5, 0.7], [255] * 8, None)), 2),
    (("outputs", "out-is-data"), 2),
    (("outputs", "checkpoint-is-out"), 1),
    (("outputs", "resume-garbage"), 2),
]


def check_run(base, tmp_path, case, n_ranks):
    folder = fresh_folder(tmp_path)
    argv, input_paths, out = run_case_argv(case, base, folder)
    inputs = Inputs(*input_paths)
    outcome = mpi_run(n_ranks, *argv)
    check_outcome(outcome, (case, n_ranks, ["run", *map(str, argv)]), inputs, out, folders=[folder])


@pytest.mark.mpi
@settings(max_examples=len(MPI_CORE_CASES), **SETTINGS)
@given(case=st.sampled_from(MPI_CORE_CASES))
def test_run_under_mpiexec_each_kind_of_bad_input(base, tmp_path, case):
    """On 1 and 2 ranks (oversubscribed): exactly one error line in all, or a valid result."""
    check_run(base, tmp_path, *case)


@pytest.mark.mpi
@settings(max_examples=10, **SETTINGS)
@given(case=run_cases(), n_ranks=st.sampled_from([1, 2]))
def test_run_under_mpiexec(base, tmp_path, case, n_ranks):
    """Random options, --init files, damaged datasets, outputs naming inputs."""
    check_run(base, tmp_path, case, n_ranks)


# ---------------------------------------------------------------------------------------------
# The estimator, in a forked child, on MPI.COMM_SELF.

BAD_SCALARS = [0, -1, 1, 2, 0.5, -0.5, 1.5, 1e308, 5e-324, math.nan, math.inf, -math.inf, 10**30,
               2**63, -2**63, 2**64, "3", "", None, True, False, [3], (1, 2), np.int64(3),
               np.float32(0.5), np.float64(math.nan), 3 + 0j, b"3", np.array(3), np.array([3, 4])]


def bounded(values):
    """Without the valid but practically endless counts (see not_endless)."""
    return [v for v in values if not (isinstance(v, int) and 1000 < v < 2**63)]


ESTIMATOR_PARAMETERS = {
    "n_clusters": st.sampled_from(BAD_SCALARS + [3, 4, 60, 61, 10**6]),
    "rho": st.sampled_from(BAD_SCALARS + [1e-308, 1e300]),
    "coupling": st.sampled_from(BAD_SCALARS + [1e-308]),
    "alpha": st.sampled_from(BAD_SCALARS),
    "max_iter": st.sampled_from(BAD_SCALARS),
    "tol": st.sampled_from(BAD_SCALARS),
    "n_init": st.sampled_from(bounded(BAD_SCALARS)),
    "random_state": st.sampled_from(BAD_SCALARS + [2**63 - 1, 2**32]),
    "monitor_every": st.sampled_from(BAD_SCALARS),
    "inner": st.sampled_from(bounded(BAD_SCALARS)),
    "n_threads": st.sampled_from(bounded(BAD_SCALARS) + [4, 64]),
    "algorithm": st.sampled_from(["nkmeans", "lloyd", "LLOYD", "", None, 3, b"lloyd"]),
    "init": st.one_of(st.sampled_from(["network", "flood", "local", "bogus", "", None, 3, b"network",
                                       "file:/nonexistent"]),
                      array_specs(INIT_SHAPES, ["<f8", "<f4", "<i8", "?", "<c16", "S4"])),
    "rho_schedule": st.sampled_from([None, (1, 10), (1,), (1, 10, 0.5, 1), "1:10", "ab", (math.nan, 10),
                                     (1, math.inf), (1e-308, 1.0000001), (1, 10, 1.5), (-1, 10), 5,
                                     [1, 10], (1, 1), ("1", "10"), (None, 10)]),
    "link_failure_prob": st.sampled_from(BAD_SCALARS + [0.5, 0.999]),
    "dropout_prob": st.sampled_from(BAD_SCALARS + [0.5]),
    "checkpoint_every": st.sampled_from(bounded(BAD_SCALARS)),
    "checkpoint": st.sampled_from(["", "/nonexistent/dir/ck.h5", 3, b"ck.h5", None]),
    "resume": st.sampled_from(["", "/nonexistent/ck.h5", 3, None]),
}


def fit_in_child(params, X, offsets, graph, agents):
    """Fit in a forked child: exit 0 when the fit is valid (finite centers and inertia,
    predict agrees with labels_), 2 for a ValueError, RAISED (traceback) otherwise."""
    def call():
        from mpi4py import MPI

        from nkmpi import NKMeans
        arguments = dict(params)
        if isinstance(arguments.get("init"), tuple):
            arguments["init"] = make_array(arguments["init"])
        try:
            model = NKMeans(**arguments, graph=graph, comm=MPI.COMM_SELF).fit(X, agent_offsets=offsets,
                                                                               agents=agents)
        except ValueError as exc:
            print(f"ValueError: {exc}", file=sys.stderr)
            return 2
        centers = np.asarray(model.cluster_centers_)
        n_agents = 1 if offsets is None else len(offsets) - 1
        assert centers.shape[:2] == (n_agents, model.n_clusters), \
            f"cluster_centers_ has shape {centers.shape} for {n_agents} agents of K={model.n_clusters}"
        assert np.isfinite(centers).all(), f"non-finite centers {centers}"
        assert np.isfinite(model.inertia_), f"inertia_ {model.inertia_}"
        assert len(model.labels_) == len(X)
        labels = model.predict(X, agent_offsets=offsets)
        assert np.array_equal(labels, model.labels_), "predict disagrees with labels_ on the fit data"
        try:        # rows grouped as in fit, with one feature too many
            model.predict(np.zeros((len(X), np.shape(X)[1] + 1)), agent_offsets=offsets)
        except ValueError:
            pass
        return 0
    return in_child(call)


def check_fit(outcome, what):
    context = f"{what}\n{outcome.describe()}"
    assert outcome.status != HANG, f"fit did not end (hang)\n{context}"
    assert outcome.status in (0, 2), f"neither a valid fit nor a ValueError\n{context}"


def blob_rows(n_rows, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-8, 8, size=(K, N_FEATURES))
    return centers[rng.integers(K, size=n_rows)] + rng.standard_normal((n_rows, N_FEATURES))


@settings(max_examples=80, **SETTINGS)
@given(params=st.lists(one_option(ESTIMATOR_PARAMETERS), min_size=1, max_size=2,
                       unique_by=lambda o: o[0]).map(dict))
def test_estimator_bad_parameters_raise_value_error(base, params):
    params = {"n_clusters": K, "max_iter": 20, **params}
    check_fit(fit_in_child(params, blob_rows(60), [0, 20, 35, 35, 60], "ring", None), params)


ROWS = ["blobs", "blobs*1e154", "blobs*1e200", "blobs-f32*1e19", "list", "ragged", "objects", "strings"]


def rows_for(X):
    """The rows a draw names: an array spec, or one of ROWS."""
    if isinstance(X, tuple):
        return make_array(X)
    rows = blob_rows(60)
    with np.errstate(over="ignore"):
        return {"blobs": rows, "blobs*1e154": rows * 1e154, "blobs*1e200": rows * 1e200,
                "blobs-f32*1e19": (rows * 1e19).astype(np.float32), "list": rows.tolist(),
                "ragged": [[1.0, 2.0]] * 30 + [[1.0]] * 30,
                "objects": np.array(rows.tolist(), dtype=object), "strings": rows.astype(str)}[X]


def estimator_arrays():
    """(X, agent_offsets, graph, agents): wrong shapes, dtypes, values and groupings."""
    X = st.one_of(st.sampled_from(ROWS),
                  array_specs([(60, N_FEATURES), (60, 1), (60,), (0, N_FEATURES), (60, 0), (2, N_FEATURES),
                               (60, N_FEATURES, 1), ()],
                              ["<f8", "<f4", "<f2", "<i8", "?", "<c16", "S3", ">f8"]))
    offsets = st.sampled_from([None, [0, 20, 35, 35, 60], [0, 60], [0, 30, 20, 60], [1, 60], [0, 59],
                               [0, 61], [0], [], [0.0, 60.0], [0, 30.5, 60], [[0, 60]], [0, 2**63 - 1],
                               [0, 2**64], [0, -1, 60], "0,60", [0, 20, 60, 60, 60]])
    graph = st.sampled_from(["ring", "complete", "er:p=0", "bogus", None, "dataset", "file:/nonexistent",
                             ("edges", [[0, 1]]), ("edges", [[0, 1, 2]]), ("edges", [[0, 99]]),
                             ("edges", [[-1, 0]]), ("edges", [[0.5, 1]]), [[0, 1], [1, 2], [2, 3]], 3])
    agents = st.sampled_from([None, None, [0, 1, 2, 3], [3, 2, 1, 0], [0, 1], [0, 0, 1, 2], [1, 2, 3, 4],
                              [0.0, 1.0, 2.0, 3.0], [-1, 0, 1, 2], [0]])
    return st.tuples(X, offsets, graph, agents)


@settings(max_examples=45, **SETTINGS)
@given(arrays=estimator_arrays(), algorithm=st.sampled_from(["nkmeans", "lloyd"]))
def test_estimator_bad_arrays_raise_value_error(base, arrays, algorithm):
    X, offsets, graph, agents = arrays
    if isinstance(graph, tuple):
        graph = np.array(graph[1])
    params = {"n_clusters": K, "max_iter": 20, "algorithm": algorithm}
    check_fit(fit_in_child(params, rows_for(X), offsets, graph, agents), (params, arrays))
