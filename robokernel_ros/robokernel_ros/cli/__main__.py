"""`python -m robokernel_ros.cli ...`: the `robokernel` command."""

import sys

from robokernel_ros.cli.main import main

sys.exit(main())
