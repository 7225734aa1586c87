"""``python -m stepsim``: the command line."""
import sys

from stepsim.cli import main

sys.exit(main())
