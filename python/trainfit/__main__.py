"""`python3 -m trainfit ARGS` (and the `trainfit` command pip installs): runs trainfit's command
line, the compiled program, with ARGS.

    python3 -m trainfit estimate --model resnet50 --batch 64 --gpu rtx4090

The program is found next to this package (trainfit/bin/trainfit, where `pip install .` puts
it), in $TRAINFIT_BUILD, or in build/release of the source tree.
"""
from __future__ import annotations

import os
import sys
from typing import List, Optional


def program() -> str:
    """The path of the trainfit program, or SystemExit with what to build."""
    here = os.path.dirname(os.path.abspath(__file__))
    places = [os.path.join(here, "bin")]
    if os.environ.get("TRAINFIT_BUILD"):
        places.append(os.environ["TRAINFIT_BUILD"])
    places.append(os.path.join(here, "..", "..", "build", "release"))
    for place in places:
        path = os.path.join(place, "trainfit")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise SystemExit("error: the trainfit program is not built (hint: `pip install .`, or "
                     "scripts/setup.sh in the source tree, or set TRAINFIT_BUILD to a CMake "
                     f"build folder; looked in {', '.join(os.path.normpath(p) for p in places)})")


def main(argv: Optional[List[str]] = None) -> int:
    """Replaces this process with the trainfit program run on argv (default: sys.argv[1:])."""
    args = sys.argv[1:] if argv is None else argv
    path = program()
    sys.stdout.flush()
    os.execv(path, [path, *args])
    return 0  # not reached: execv does not return


if __name__ == "__main__":
    sys.exit(main())
