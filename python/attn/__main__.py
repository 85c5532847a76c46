"""`python -m attn` runs the real-model demo (same as `python -m attn.demo`)."""

import sys

from .demo import main

sys.exit(main())
