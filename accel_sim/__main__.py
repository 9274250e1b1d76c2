"""``python -m accel_sim``: see ``accel_sim.cli``."""

import os
import sys

from accel_sim.cli import main

try:
    code = main()
    sys.stdout.flush()
except BrokenPipeError:  # the reader went away (``| head``): no traceback, as Python's docs advise
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 1
sys.exit(code)
