import sys

from petri.cli import main

sys.exit(main())
