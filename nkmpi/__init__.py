"""nkmpi: networked K-means (NK-means) with distributed data, as an MPI program."""

__version__ = "0.1.0"

#: Public names and the module each lives in, loaded on first use: `nkmpi run`
#: must reach its signal handlers (nkmpi.stop) before numpy or MPI load, and
#: serial tools never initialize MPI (the estimator imports mpi4py).
_LAZY = {"InputError": "errors", "Stopped": "errors", "Options": "options", "NKMeans": "estimator",
         "simulate": "reference"}


def __getattr__(name):
    if name in _LAZY:
        from importlib import import_module
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'nkmpi' has no attribute {name!r}")


__all__ = ["InputError", "NKMeans", "Options", "Stopped", "simulate", "__version__"]
