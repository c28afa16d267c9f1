"""How the builder starts agents, checked without root."""

import os

import emulator
from emulator.fabric import builder


def test_agents_run_from_the_directory_that_holds_this_copy_of_the_package():
    # python -m imports from its cwd first: from anywhere else an agent may import another copy (an installed one)
    assert os.path.samefile(os.path.join(builder.PACKAGE_PARENT, "emulator"), os.path.dirname(emulator.__file__))
