import sys

from deployc.cli import main

sys.exit(main())
