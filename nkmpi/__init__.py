"""nkmpi: networked K-means (NK-means) with distributed data, as an MPI program."""

__version__ = "0.1.0"

from .errors import InputError  # noqa: E402
from .options import Options  # noqa: E402


def __getattr__(name):
    # The estimator imports mpi4py; load it only when asked so that serial
    # tools (and the MPI-free modules) never initialize MPI.
    if name == "NKMeans":
        from .estimator import NKMeans
        return NKMeans
    if name == "simulate":
        from .reference import simulate
        return simulate
    raise AttributeError(f"module 'nkmpi' has no attribute {name!r}")


__all__ = ["InputError", "NKMeans", "Options", "simulate", "__version__"]
