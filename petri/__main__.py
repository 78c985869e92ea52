import sys

from petri.cli.main import main

sys.exit(main())
