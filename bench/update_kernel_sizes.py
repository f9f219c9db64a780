"""Re-measure minibuild/data/kernel_sizes.json (the table `minibuild size estimate` uses).

    python bench/update_kernel_sizes.py [--platform linux,ios,python,android] [--abi A]

The same as `minibuild size calibrate`: builds every registry kernel, and a one-kernel
library, per target; attributes both; keeps per-kernel / per-support-unit bytes and a
fixed + per-kernel model of the rest. Run it after changing kernels, flags or the
toolchain, and commit the table.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from minibuild import size_cli  # noqa: E402

if __name__ == "__main__":
    argv = sys.argv[1:]
    if not any(a.startswith("--platform") for a in argv):
        argv = ["--platform", "linux,ios,python"] + argv
    sys.exit(size_cli.main(["calibrate", *argv]))
