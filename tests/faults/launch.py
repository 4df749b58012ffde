"""`python tests/faults/launch.py FAULT_FILE ARGS...`: `trtserve ARGS...` with faults injected (injector.py).

Tests start it as the server process (Server's `launcher`, tests/api/conftest.py), so that only
that process's engine cores are patched.
"""

import sys
from pathlib import Path

from injector import install  # this script's directory is sys.path[0]

if __name__ == "__main__":
    install(Path(sys.argv[1]))
    from trtserve.cli import main

    main(args=sys.argv[2:], prog_name="trtserve")
