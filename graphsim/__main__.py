import sys

from graphsim.cli.app import main

sys.exit(main())
