import sys

from nvcc_evo.cli import main

sys.exit(main())
