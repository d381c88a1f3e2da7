"""egressd for Scrapy: a downloader middleware that leases egressd proxies over the lease
service's HTTP face (docs/leases.md) and sets request.meta["proxy"].

Enable it in settings.py:

    DOWNLOADER_MIDDLEWARES = {"egressd_scrapy.EgressdProxyMiddleware": 585}
    EGRESSD_LEASE_URL = "http://127.0.0.1:8461"  # the token comes from $EGRESSD_LEASE_TOKEN

See README.md beside this package for every setting.
"""

from egressd_scrapy.client import LeaseClient, LeaseError
from egressd_scrapy.middleware import EgressdProxyMiddleware

__all__ = ["EgressdProxyMiddleware", "LeaseClient", "LeaseError"]
