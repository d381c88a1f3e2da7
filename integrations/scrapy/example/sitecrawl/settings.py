# An example project: `scrapy crawl site -a start_url=http://127.0.0.1:8000/` fetches every
# page of a site through egressd leases. The two lines that matter:
DOWNLOADER_MIDDLEWARES = {"egressd_scrapy.EgressdProxyMiddleware": 585}
EGRESSD_LEASE_URL = "http://127.0.0.1:8461"  # egressd run --lease-http-listen; token in $EGRESSD_LEASE_TOKEN

# The rest is ordinary Scrapy, and optional egressd settings (README.md lists them all).
import json
import os

EGRESSD_LEASE_URL = os.environ.get("EGRESSD_LEASE_URL", EGRESSD_LEASE_URL)
EGRESSD_ACQUIRE = json.loads(os.environ.get("EGRESSD_ACQUIRE", "{}"))  # e.g. {"selector": {"pool": "web"}}
EGRESSD_LEASE_MODE = os.environ.get("EGRESSD_LEASE_MODE", "session")
EGRESSD_BLOCK_MARKERS = ["captcha"]
EGRESSD_BLOCK_RETRIES = int(os.environ.get("EGRESSD_BLOCK_RETRIES", "0"))
EGRESSD_BLOCK_COOLDOWN = int(os.environ.get("EGRESSD_BLOCK_COOLDOWN", "0"))  # 0: the service's

BOT_NAME = "sitecrawl"
SPIDER_MODULES = ["sitecrawl.spiders"]
ROBOTSTXT_OBEY = False
TELNETCONSOLE_ENABLED = False
CONCURRENT_REQUESTS = 4
DOWNLOAD_DELAY = float(os.environ.get("SCRAPY_DOWNLOAD_DELAY", "0"))
REQUEST_FINGERPRINTER_IMPLEMENTATION = "2.7"
LOG_LEVEL = os.environ.get("SCRAPY_LOG_LEVEL", "INFO")
