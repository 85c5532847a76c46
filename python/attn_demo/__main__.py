"""`python -m attn_demo` runs the real-model demo (attn_demo.demo)."""

import sys

from .demo import main

sys.exit(main())
