import sys

from hindsight_server.cli import main

sys.exit(main())
