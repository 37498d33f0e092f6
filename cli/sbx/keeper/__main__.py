"""``python -m sbx.keeper RUN_DIR RUN_ID``: a named sandbox's keeper (:mod:`sbx.keeper`)."""
from __future__ import annotations

import sys

from sbx.keeper import main

sys.exit(main())
