"""``python -m llmsched_gym.cli``: the ``llmsched-gym`` command."""

import sys

from . import main

sys.exit(main())
