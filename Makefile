# nkmpi: set-up, tests and the demo.  `make install && make test` on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# MPI=mpich installs the MPICH wheel (mpiexec with no system MPI);
# MPI=system builds mpi4py against the mpicc found on PATH (a cluster's own MPI).
MPI    ?= mpich
DEMO    = demo

.PHONY: install test test-slurm demo bench scaling experiments quality clean

install:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
ifeq ($(MPI),system)
	$(BIN)/python -m pip install --no-binary mpi4py --no-cache-dir mpi4py
	$(BIN)/python -m pip install -e '.[test,plot,progress]'
else
	$(BIN)/python -m pip install -e '.[test,plot,progress,mpich]'
endif
	$(BIN)/python -c "from mpi4py import MPI; print('nkmpi: MPI library:', MPI.Get_library_version().splitlines()[0])"

test:
	$(BIN)/python -m pytest tests

test-slurm:
	NKMPI_TEST_SLURM=1 $(BIN)/python -m pytest tests/test_slurm.py

demo:
	@mkdir -p $(DEMO)
	@test -f $(DEMO)/blobs.h5 || $(BIN)/python -m data_tools.generate $(DEMO)/blobs.h5 \
		--clusters 6 --features 2 --points 9600 --agents 16 --partition by-cluster:4 --seed 1
	PATH=$(abspath $(BIN)):$$PATH mpiexec -n 4 nkmpi run $(DEMO)/blobs.h5 -k 6 --rho 100 --out $(DEMO)/result.h5
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
