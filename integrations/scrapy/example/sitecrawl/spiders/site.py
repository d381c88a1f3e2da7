from urllib.parse import urlparse

import scrapy


class SiteSpider(scrapy.Spider):
    """Every page of one site (same host), each logged with the proxy that fetched it."""

    name = "site"

    def __init__(self, start_url, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start_url]
        self.allowed_domains = [urlparse(start_url).hostname]

    def parse(self, response):
        lease = response.meta.get("egressd_lease", {})
        yield {"url": response.url, "status": response.status, "proxy": lease.get("proxy"), "lease": lease.get("id")}
        yield from response.follow_all(css="a::attr(href)", callback=self.parse)
