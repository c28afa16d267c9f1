"""``python -m emulator`` is the ``fabric-emu`` command."""

import sys

from emulator.cli import main

sys.exit(main())
