"""``python -m sbx.domain.egress.proxy CONFIG_PATH RUN_ID``: the proxy process (see
:func:`sbx.domain.egress.proxy.process.proxy_argv`)."""
from __future__ import annotations

import sys

from sbx.domain.egress.proxy.process import main

sys.exit(main())
