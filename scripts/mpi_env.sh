#!/usr/bin/env bash
# Open MPI (Debian packages) and mpi4py (PyPI) for libattn_mpi, its tests (make test-mpi) and
# attn.distributed. Idempotent and quiet: a no-op when mpicc, mpirun and mpi4py are present.
#   bash scripts/mpi_env.sh        # as root (apt-get); mpi4py is built against the installed Open MPI
set -euo pipefail
PY=${PYTHON:-python3}

if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
  echo "mpi_env: installing openmpi-bin libopenmpi-dev"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -y -qq update >/dev/null
  apt-get -y -qq install --no-install-recommends openmpi-bin libopenmpi-dev >/dev/null
fi

if ! "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('mpi4py') is None)" 2>/dev/null; then
  echo "mpi_env: installing mpi4py"
  "$PY" -m pip install -q --disable-pip-version-check mpi4py
fi
