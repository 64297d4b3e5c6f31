import sys

from deployc.cli.app import main

sys.exit(main())
