import os
import sys

# Machines here are shared: OpenMP threads that spin while waiting slow every process on the machine
# (a 2-thread training step was 100x slower next to other jobs).  Passive waiting avoids that; a user
# can still set OMP_WAIT_POLICY explicitly.  Must be set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from bench.cli import main  # noqa: E402

try:
    code = main()
    sys.stdout.flush()
except BrokenPipeError:  # the reader went away (`bench ls | head`): stop quietly, as other command-line tools do
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes at exit
    code = 1
sys.exit(code)
