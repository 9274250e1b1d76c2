"""``python -m accel_sim``: see ``accel_sim.cli``."""

import sys

from accel_sim.cli import main

sys.exit(main())
