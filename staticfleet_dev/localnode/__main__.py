"""`python -m staticfleet_dev.localnode`: run the local node (see `node.main`)."""

import sys

from staticfleet_dev.localnode.node import main

sys.exit(main())
