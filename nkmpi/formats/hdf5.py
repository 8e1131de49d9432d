"""What nkmpi's HDF5 formats share: the header that says what a file is (and reading a
file's attributes alone), run ids and temporary names, the checks an output passes before
any work, how ranks share a file, and the two ways a file is written whole.

A file is written under a temporary name of its own run, in its folder, flushed to the
storage (fsync) and renamed once complete, and the folder flushed after the rename, so
that the final name never shows a partial file, not even after a crash of the node:
`atomic_file` for one process (datasets, the data tools' pictures), `write_slices` for
ranks writing their own slices (results and checkpoints through `write_state`, predicted
labels).  Ranks share a file through HDF5's MPI-IO driver where h5py was built with MPI,
else one process at a time (`io_driver`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

import h5py
import numpy as np
from numpy.typing import DTypeLike

from .. import __version__
from ..errors import InputError, agree, agree_on_failure

if TYPE_CHECKING:
    from mpi4py import MPI

#: What h5py raises on a damaged or unexpected file (RuntimeError: HDF5's own complaints).
READ_ERRORS = (OSError, KeyError, ValueError, TypeError, RuntimeError)
#: What a result and a checkpoint share: every agent's centers, the centers it started
#: from, and a group of one array per metric, a row per monitoring point.
CENTERS, INITIAL_CENTERS, METRICS_GROUP = "centers", "initial_centers", "metrics"
#: How ranks share a file: together through HDF5's MPI-IO driver, or one process at a time.
#: Every file `write_slices` writes records which in its attribute IO_ATTRIBUTE.
MPIO, SERIAL = "mpio", "serial"
IO_ATTRIBUTE = "hdf5_io"
#: The environment variable that chooses: `auto` (the default: MPIO where h5py has it) or SERIAL.
IO_SETTING, IO_SETTINGS = "NKMPI_HDF5", ("auto", SERIAL)


def plain(value: object) -> object:
    """An HDF5 attribute as a plain Python value (str, number, bool or list), so that
    comparing it never fails whatever type a damaged or foreign file holds."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def write_header(f: h5py.File, file_format: str, version: int) -> None:
    """The attributes `check_header` reads back: which format the file is, in which version."""
    f.attrs["format"], f.attrs["version"] = file_format, version


def check_header(f: h5py.File, path_text: str, file_format: str, version: int, what: str) -> None:
    """Refuse a file of another format or of a version this nkmpi does not read, before
    reading any of it: its arrays would not mean what the reader takes them for.

    path_text starts each message (the path, or the option that named it); what names
    the format to the user ("dataset", "result", "checkpoint").
    """
    found = plain(f.attrs.get("format"))
    if found != file_format:
        raise InputError(f"{path_text}: not an nkmpi {what}: its format attribute is {found!r}, "
                         f"expected {file_format!r}")
    found = plain(f.attrs.get("version"))
    if found != version:
        raise InputError(f"{path_text}: {what} version {found!r} is not supported (this nkmpi reads "
                         f"version {version})")


@contextlib.contextmanager
def reading(where: str, errors: tuple = READ_ERRORS) -> Iterator[None]:
    """Turn what reading a damaged or foreign file raises (`errors`) into one InputError,
    `WHERE: what went wrong`.  Only around reading code: elsewhere a bug must show its
    traceback."""
    try:
        yield
    except InputError:
        raise
    except errors as exc:
        raise InputError(f"{where}: {exc}") from None


@contextlib.contextmanager
def opened(path: str | os.PathLike, formats: dict, where: str | None = None) -> Iterator[h5py.File]:
    """The nkmpi file at `path`, open for reading, refused unless it exists, is HDF5 and is
    one of `formats` ({format: (version, what)}; another is refused as not the first of
    them).  `where` starts the messages (default: the path); h5py's errors while the body
    reads become InputErrors."""
    path = os.fspath(path)
    where = where or path
    if not os.path.isfile(path):
        raise InputError(f"{where}: no such file")
    what = next(iter(formats.values()))[1] if len(formats) == 1 else "file"
    with reading(f"{where}: cannot read the {what}"):
        if not h5py.is_hdf5(path):
            raise InputError(f"{where}: not an HDF5 file")
        with h5py.File(path, "r") as f:
            found = plain(f.attrs.get("format"))
            expected = found if isinstance(found, str) and found in formats else next(iter(formats))
            check_header(f, where, expected, *formats[expected])
            yield f


def read_attributes(path: str | os.PathLike, formats: dict) -> dict:
    """The root attributes, as plain values, of the nkmpi file at `path`, one of `formats`
    (as `opened`); its arrays are not read: for the questions its attributes answer."""
    with opened(path, formats) as f:
        return {key: plain(value) for key, value in f.attrs.items()}


def io_setting() -> str:
    """$NKMPI_HDF5, checked: `auto` (also when unset) or SERIAL."""
    setting = os.environ.get(IO_SETTING) or IO_SETTINGS[0]
    if setting not in IO_SETTINGS:
        raise InputError(f"{IO_SETTING}={setting}: expected one of {', '.join(IO_SETTINGS)}")
    return setting


def io_driver(comm: MPI.Comm | None) -> str:
    """How the ranks of `comm` share a file: MPIO when there are several, h5py was built
    with MPI (a site's build; Debian's python3-h5py-mpi, which it loads under a launcher)
    and NKMPI_HDF5 is not SERIAL; else SERIAL.  Collective: rank 0's answer for every rank,
    since a rank that opened the file the other way would leave the rest waiting."""
    def decide():
        parallel = comm is not None and comm.Get_size() > 1 and h5py.get_config().mpi
        return MPIO if io_setting() == "auto" and parallel else SERIAL

    return decide() if comm is None else comm.bcast(agree(comm, decide), root=0)


def shared_file(path: str | os.PathLike, comm: MPI.Comm | None) -> h5py.File:
    """`path` open for reading by the ranks of `comm` together through MPI-IO when
    `io_driver` says so (opening and closing it are collective then), else by this
    process alone."""
    if io_driver(comm) == MPIO:
        return h5py.File(path, "r", driver=MPIO, comm=comm)
    return h5py.File(path, "r")


def new_run_id() -> str:
    """A name part no other run picks: host, process and random bits.

    Rank 0 draws it and every rank uses it, so a run's temporary files are its
    own and two runs given one output name never write into the same file.
    """
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


def partial_name(path: str | os.PathLike, run_id: str) -> str:
    """Where run `run_id` writes a file before renaming it to `path`."""
    return f"{os.fspath(path)}.partial-{run_id}"


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file: equal once links are resolved, or one inode."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:                 # one of them does not exist (yet)
        return False


def _files_read_through(path: str, found: set[str]) -> None:
    """Add to `found` the files that HDF5 file `path` reads its datasets from: the sources of
    its virtual datasets and the targets of its external links, and theirs in turn.  A
    relative name is taken both from the file's folder and from the working directory:
    HDF5 may find it in either."""
    def add(name):
        for candidate in {os.path.join(os.path.dirname(path), name), name}:
            candidate = os.path.realpath(candidate)
            if candidate not in found:
                found.add(candidate)
                _files_read_through(candidate, found)

    def visit(group):
        for name in group:
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink):
                add(link.filename)
            elif isinstance(link, h5py.HardLink):
                member = group[name]
                if isinstance(member, h5py.Group):
                    visit(member)
                elif member.is_virtual:
                    for source in member.virtual_sources():
                        if source.file_name != ".":         # "." : this file itself
                            add(source.file_name)
    try:
        if not h5py.is_hdf5(path):
            return
        with h5py.File(path, "r") as f:
            visit(f)
    except (OSError, ValueError, KeyError, RuntimeError):      # unreadable: its reader will say why
        return


def files_read_through(path: str | os.PathLike) -> list[str]:
    """The files other than `path` whose bytes reading HDF5 file `path` reads (virtual
    datasets' sources, external links' targets): an output replacing one of them would
    destroy the data as surely as one replacing `path`."""
    path = os.path.realpath(os.fspath(path))
    found = {path}
    _files_read_through(path, found)
    return sorted(found - {path})


def refuse_overwriting(option: str, path: str | os.PathLike, inputs: dict) -> None:
    """Fail when output `path` names one of `inputs` ({what: path or None}), through
    links included, or a file an HDF5 input reads its rows from: no output ever replaces
    an input."""
    for what, other in inputs.items():
        if other is None:
            continue
        if same_file(path, other):
            raise InputError(f"{option} {path} is {what} ({other}): refusing to overwrite it; "
                             "choose another name")
        for source in files_read_through(other):
            if same_file(path, source):
                raise InputError(f"{option} {path} holds data of {what} ({other} reads it through a virtual "
                                 "dataset or an external link): refusing to overwrite it; choose another name")


def _cannot_write(path: str | os.PathLike, exc: OSError) -> InputError:
    """A file system's refusal (full, read-only), the user's to fix, naming the file."""
    return InputError(f"cannot write {path}: {exc.strerror or exc}")


def check_output(path: str | os.PathLike, run_id: str, attrs: dict) -> None:
    """Fail early when a file cannot be written at `path`: the folder must exist and
    be writable, and the run's temporary name take an HDF5 file holding the
    run's attributes, which a probe under that very name proves (long names,
    read-only and full file systems, values HDF5 cannot store); and NKMPI_HDF5
    must say how."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise InputError(f"output {path} is a directory")
    if not os.path.isdir(folder):
        raise InputError(f"output folder {folder} does not exist")
    io_setting()
    probe = partial_name(path, run_id)
    try:
        with open(probe, "x"):          # the name and the folder, in the system's own words
            pass
        with h5py.File(probe, "w") as f:
            f.attrs.update(attrs)
    except OSError as exc:
        raise _cannot_write(probe, exc) from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"cannot store the run's parameters in {path}: {exc}") from None
    finally:
        if os.path.exists(probe):
            os.remove(probe)


@contextlib.contextmanager
def removed_on_failure(temporary: str) -> Iterator[None]:
    """Remove the file `temporary` when the body fails, by an exception or a stop signal's:
    a file written in part never stays behind."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def _flush_to_storage(path: str | os.PathLike) -> None:
    """fsync `path`: its written bytes are on the storage, not only in this node's page
    cache, before it takes a final name (a rename can outlive a crash that the data does
    not)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _renamed(temporary: str, path: str | os.PathLike) -> None:
    """The flushed `temporary` takes `path`'s name, and the folder records it (where the file
    system refuses a folder's fsync, the rename stands all the same)."""
    os.replace(temporary, path)
    with contextlib.suppress(OSError):
        _flush_to_storage(os.path.dirname(os.path.abspath(path)))


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[str]:
    """Write `path` whole, in one process: the body writes the temporary file this yields
    (a name of this run's own, in the same folder), which takes `path`'s place once the
    body is done; on any failure it is removed and `path` stays as it was.

    A file system that refuses the file (full, read-only) is the user's to fix, so its
    error is an InputError naming `path`.
    """
    temporary = partial_name(path, new_run_id())
    try:
        with removed_on_failure(temporary):
            yield temporary
            _flush_to_storage(temporary)
            _renamed(temporary, path)
    except OSError as exc:
        raise _cannot_write(path, exc) from None


@dataclass(frozen=True)
class Slice:
    """A dataset of `shape` and `dtype` of which this rank holds `rows`, from row `start` on."""

    shape: tuple
    dtype: DTypeLike
    start: int
    rows: np.ndarray


def write_slices(path: str | os.PathLike, comm: MPI.Comm | None, run_id: str, *, file_format: str,
                 version: int, attrs: dict, whole: dict, sliced: dict) -> None:
    """Write a file of which each rank holds a slice; collective over `comm` (None: one process).

    `whole` ({name: array}) and `attrs` are written as rank 0 holds them, `sliced`
    ({name: Slice}) each rank its own rows: no rank holds all N rows' values, so none
    writes the file alone.  Under the run's temporary name, the ranks write the file
    together through MPI-IO where h5py has it (`io_driver`), else in turn; either way
    they agree on failures before the steps they take together (closing the file, each
    rank's flush of its writes to the storage, the rename), so that no rank waits in one
    that a failed rank never reaches: the first rank that failed raises its error, the
    others RankFailed, and the temporary file is removed, so nothing half-written stays.
    Rank 0 renames the file once all wrote; `hdf5_io` records how (`MPIO` or `SERIAL`).
    """
    rank = 0 if comm is None else comm.Get_rank()
    driver = io_driver(comm)
    whole = {name: np.asarray(array) for name, array in whole.items()}
    shapes = {name: (array.shape, array.dtype) for name, array in whole.items()}
    shapes.update({name: (part.shape, part.dtype) for name, part in sliced.items()})
    attrs = {"nkmpi_version": __version__, IO_ATTRIBUTE: driver, **attrs}
    write = _write_together if driver == MPIO else _write_in_turn
    temporary = partial_name(path, run_id)
    with removed_on_failure(temporary):
        write(temporary, comm, (file_format, version), attrs, shapes, whole if rank == 0 else {}, sliced)
        failure = None
        try:                                # each rank its own writes, from its own node's cache
            _flush_to_storage(temporary)
        except OSError as exc:
            failure = _cannot_write(path, exc)
        agree_on_failure(comm, failure)
        if rank == 0:
            _renamed(temporary, path)
    if comm is not None:
        comm.Barrier()


def _lay_out(f: h5py.File, header: tuple, attrs: dict, shapes: dict) -> None:
    """The header, the attributes and every dataset sized ({name: (shape, dtype)})."""
    write_header(f, *header)
    for key, value in attrs.items():
        f.attrs[key] = value
    for name, (shape, dtype) in shapes.items():
        f.create_dataset(name, shape, dtype=dtype)


#: Bytes of a slice written at once: h5py writes from a contiguous copy, so that a slice
#: given as a broadcast view (every agent's initial centers, when all start alike) is
#: never expanded whole.
WRITE_CHUNK_BYTES = 2**24


def _write_own(f: h5py.File, whole: dict, sliced: dict) -> None:
    """This rank's part of the laid-out file: the whole arrays (rank 0's), its own rows."""
    for name, array in whole.items():
        f[name][...] = array
    for name, part in sliced.items():
        rows = part.rows
        step = max(1, WRITE_CHUNK_BYTES // max(1, rows[:1].nbytes))
        for first in range(0, len(rows), step):
            chunk = rows[first:first + step]
            f[name][part.start + first:part.start + first + len(chunk)] = chunk


def _write_in_turn(temporary, comm, header, attrs, shapes, whole, sliced):
    """Rank 0 lays the file out, then the ranks write their slices in rank order, a token
    passed rank to rank keeping one writer at a time as a serial HDF5 build requires
    (and telling a rank whether all before it wrote: after a failure it writes nothing)."""
    rank = 0 if comm is None else comm.Get_rank()
    size = 1 if comm is None else comm.Get_size()
    going_on = comm.recv(source=rank - 1, tag=7) if rank > 0 else True
    failure = None
    if going_on:
        try:
            if rank == 0:
                with h5py.File(temporary, "w") as f:
                    _lay_out(f, header, attrs, shapes)
            with h5py.File(temporary, "r+") as f:
                _write_own(f, whole, sliced)
        except BaseException as exc:
            failure = exc
    if rank < size - 1:
        comm.send(going_on and failure is None, dest=rank + 1, tag=7)
    agree_on_failure(comm, failure)


def _write_together(temporary, comm, header, attrs, shapes, whole, sliced):
    """Every rank opens the file through MPI-IO and lays it out with rank 0's attributes
    and shapes (collective steps, which take identical arguments on every rank), then
    writes its slices independently: contiguous blocks of rows, which gain nothing from
    collective buffering, and a rank that fails there leaves the others free to go on to
    the agreement and close the file with it."""
    attrs, shapes = comm.bcast((attrs, shapes), root=0)
    with h5py.File(temporary, "w", driver=MPIO, comm=comm) as f:
        _lay_out(f, header, attrs, shapes)
        failure = None
        try:
            _write_own(f, whole, sliced)
        except BaseException as exc:
            failure = exc
        agree_on_failure(comm, failure)


def write_state(path: str | os.PathLike, comm: MPI.Comm | None, run_id: str, *, file_format: str,
                version: int, rows_name: str, rows_dtype: DTypeLike, n_agents: int, n_points: int,
                agent_start: int, centers: np.ndarray, initial_centers: np.ndarray, row_start: int,
                rows: np.ndarray, metrics: dict, attrs: dict, extras: dict | None = None) -> None:
    """Write a result or checkpoint whole (`write_slices`): each rank its agents' centers
    from agent_start on and its rows from row_start on; rank 0 the metrics and `extras`
    ({name: array}, datasets every rank holds whole)."""
    _, n_clusters, n_features = centers.shape
    shape = (n_agents, n_clusters, n_features)
    whole = {f"{METRICS_GROUP}/{name}": series for name, series in metrics.items()}
    whole.update(extras or {})
    sliced = {CENTERS: Slice(shape, np.float64, agent_start, centers),
              INITIAL_CENTERS: Slice(shape, np.float64, agent_start, initial_centers),
              rows_name: Slice((n_points,), rows_dtype, row_start, rows)}
    write_slices(path, comm, run_id, file_format=file_format, version=version, attrs=attrs, whole=whole,
                 sliced=sliced)


def read_metrics(f: h5py.File) -> dict:
    """A result's or checkpoint's metrics: {name: one value per monitoring point}."""
    return {name: f[METRICS_GROUP][name][()] for name in f[METRICS_GROUP]}
