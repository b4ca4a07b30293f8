import sys

from consumer_runtime.main import main

sys.exit(main())
