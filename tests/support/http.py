"""One TLS context for every HTTP client the tests make.

An httpx client builds a TLS context when it is made (the CA bundle loaded: about 20 ms of
CPU), even to talk plain HTTP to a local gateway; the tests make thousands of clients, one per
request in many helpers, and that once added up to more than a minute of the suite's CPU. Passing
this context (``verify=TLS``) costs nothing, and verifies exactly as the default would.
"""

from __future__ import annotations

import httpx

TLS = httpx.create_ssl_context()
