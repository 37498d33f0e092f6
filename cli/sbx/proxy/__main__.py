"""``python -m sbx.proxy CONFIG_PATH RUN_ID``: the proxy process (its start and ready line:
:data:`sbx.seams.host.handshake.PROXY`)."""
from __future__ import annotations

import sys

from sbx.proxy.process import main

sys.exit(main())
