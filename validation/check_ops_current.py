"""The recorded op cases (tests/data/op_cases.json) are what PyTorch measures today.

The C++ op tests compare trainfit against that file; this check re-measures every case on the
installed PyTorch so the file cannot drift from a real measurement.

    /usr/bin/python3 validation/check_ops_current.py
"""
import sys

import op_cases

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "--check"]
    op_cases.main()
