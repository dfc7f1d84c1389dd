import sys

from gateway_mcp.cli import main

sys.exit(main())
