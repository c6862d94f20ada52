"""`python -m robokernel_ros.scoring PATH...`: `robokernel score` on its own."""

import sys

from robokernel_ros.cli.score import main

sys.exit(main())
