import sys

from sglang_engine_simulator.cli import main

sys.exit(main())
