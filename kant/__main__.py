import sys

from kant.cli import main

sys.exit(main())
