"""The downloader middleware: leases per session (default) or per request, sets
request.meta["proxy"], renews, reports blocks, releases."""

import os
import time
import uuid
from urllib.parse import urlparse

from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet import defer, task, threads

from egressd_scrapy.client import LeaseClient, LeaseError

# Renewals that say the lease is gone: the session then gets a new one.
_GONE = (404, 409, 410)


class EgressdProxyMiddleware:
    """Settings (only EGRESSD_LEASE_URL is required; README.md has the details):

    EGRESSD_LEASE_URL       the leaser's HTTP face, e.g. http://127.0.0.1:8461
    EGRESSD_LEASE_TOKEN     the crawler's bearer token (default: $EGRESSD_LEASE_TOKEN)
    EGRESSD_LEASE_CAFILE    CA file for an https:// face with a private CA
    EGRESSD_LEASE_MODE      "session" (default: one lease per meta["egressd_session"]) or "request"
    EGRESSD_ACQUIRE         dict merged into every acquire: selector, minAnonymity, ...
    EGRESSD_TTL_SECONDS     lease TTL (default 300), renewed at a third of it
    EGRESSD_BLOCK_STATUS    statuses reported as blocked (default [403, 429])
    EGRESSD_BLOCK_MARKERS   strings whose presence in a body means blocked (e.g. captcha pages)
    EGRESSD_BLOCK_COOLDOWN  cooldownSeconds of a block report (default: the service's)
    EGRESSD_BLOCK_RETRIES   how often a blocked request is retried on a new lease (default 0)
    EGRESSD_ACQUIRE_WAIT    seconds an acquire may wait for a slot (default 30): the service
                            holds it (waitSeconds) until one frees; a 429 or 500 is retried
                            within the same time
    """

    def __init__(self, crawler):
        s = crawler.settings
        self.client = LeaseClient(
            s.get("EGRESSD_LEASE_URL"),
            s.get("EGRESSD_LEASE_TOKEN") or os.environ.get("EGRESSD_LEASE_TOKEN", ""),
            cafile=s.get("EGRESSD_LEASE_CAFILE"),
        )
        self.mode = s.get("EGRESSD_LEASE_MODE", "session")
        if self.mode not in ("session", "request"):
            raise ValueError(f"EGRESSD_LEASE_MODE must be session or request, not {self.mode!r}")
        self.acquire_fields = dict(s.getdict("EGRESSD_ACQUIRE"))
        self.ttl = s.getint("EGRESSD_TTL_SECONDS", 300)
        self.block_status = {int(x) for x in s.getlist("EGRESSD_BLOCK_STATUS", [403, 429])}
        self.block_markers = [m.lower().encode() if isinstance(m, str) else m.lower() for m in s.getlist("EGRESSD_BLOCK_MARKERS", [])]
        self.block_cooldown = s.getint("EGRESSD_BLOCK_COOLDOWN", 0) or None
        self.block_retries = s.getint("EGRESSD_BLOCK_RETRIES", 0)
        self.acquire_wait = s.getfloat("EGRESSD_ACQUIRE_WAIT", 30)
        self.stats = crawler.stats
        self.sessions = {}  # session key -> lease
        self.waiting = {}  # session key -> Deferreds waiting for its acquire
        self.active = {}  # lease ID -> lease, every lease held (renewed, released at close)
        self.renew_at = {}  # lease ID -> when it is due for renewal (time.monotonic)
        self.renewer = None

    @classmethod
    def from_crawler(cls, crawler):
        if not crawler.settings.get("EGRESSD_LEASE_URL"):
            raise NotConfigured("EGRESSD_LEASE_URL is not set")
        mw = cls(crawler)
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(mw.request_dropped, signal=signals.request_dropped)
        return mw

    # -- lifecycle ---------------------------------------------------------------------------

    def spider_opened(self, spider):
        # Each lease is renewed at a third of the TTL it was granted (EGRESSD_ACQUIRE or
        # egressd_acquire may ask for another than EGRESSD_TTL_SECONDS); the tick only looks.
        self.renewer = task.LoopingCall(self._renew_due, spider)
        self.renewer.start(1.0, now=False)

    def spider_closed(self, spider):
        if self.renewer and self.renewer.running:
            self.renewer.stop()
        leases, self.active, self.sessions = list(self.active.values()), {}, {}
        return defer.DeferredList([self._in_thread(spider, "release", self.client.release, lease["id"]) for lease in leases])

    def request_dropped(self, request, spider):
        # A redirect the scheduler drops (its target was seen already) never comes back to
        # process_request: in request mode the lease it carries ends here.
        lease = request.meta.get("egressd_lease")
        if self.mode == "request" and lease is not None and self._drop(lease, request):
            self._in_thread(spider, "release", self.client.release, lease["id"])

    # -- requests ----------------------------------------------------------------------------

    def process_request(self, request, spider):
        if request.meta.get("dont_egressd"):
            return None
        if self.mode == "request":
            # A request that comes back with a lease is a redirect or a retry, made by a
            # middleware that answered before this one saw the response or exception
            # (RedirectMiddleware, RetryMiddleware): its lease ends here, or it would be
            # renewed until the spider closes and hold a slot of its proxy all along.
            old = request.meta.get("egressd_lease")
            if old is not None and self._drop(old, request):
                self._in_thread(spider, "release", self.client.release, old["id"])
            d = threads.deferToThread(self._acquire, self._acquire_body(request, None))
            d.addCallback(self._granted)
            return d.addCallback(self._apply, request)
        key = str(request.meta.get("egressd_session", "default"))
        lease = self.sessions.get(key)
        if lease is not None:
            return self._apply(lease, request)
        # Requests of one session share one acquire.
        d = defer.Deferred()
        if key in self.waiting:
            self.waiting[key].append(d)
        else:
            self.waiting[key] = [d]
            t = threads.deferToThread(self._acquire, self._acquire_body(request, key))
            t.addCallbacks(self._session_granted, self._session_failed, callbackArgs=(key,), errbackArgs=(key,))
        return d.addCallback(self._apply, request)

    def process_response(self, request, response, spider):
        lease = request.meta.get("egressd_lease")
        if lease is None:
            return response
        refusals = request.meta.get("egressd_refusals", 0)
        if response.status == 407 and refusals < 3:
            # The proxy refused the lease's token: the lease was given back while this request
            # waited (a block report released it, and its tokens are revoked), or the proxy was
            # rebuilt. Retried on the session's current lease, a new one if need be.
            self.stats.inc_value("egressd/refused")
            if self._drop(lease, request):
                self._in_thread(spider, "release", self.client.release, lease["id"])
            meta = {k: v for k, v in request.meta.items() if k not in ("proxy", "egressd_lease")}
            meta["egressd_refusals"] = refusals + 1
            req = request.replace(meta=meta, dont_filter=True)
            req.headers.pop(b"Proxy-Authorization", None)
            return req
        blocked = response.status in self.block_status or self._has_marker(response)
        if blocked:
            self.stats.inc_value("egressd/blocked")
        # A blocked lease is reported and given back, once however many of its responses say
        # so (its session gets another on its next request); in request mode every lease ends
        # with its response.
        if blocked and self._drop(lease, request):
            self.stats.inc_value("egressd/reported")
            host = urlparse(request.url).hostname
            self._in_thread(spider, "report", self.client.report, lease["id"], "blocked", host, self.block_cooldown, True)
        elif self.mode == "request" and self._drop(lease, request):
            self._in_thread(spider, "release", self.client.release, lease["id"])
        tries = request.meta.get("egressd_block_retries", 0)
        if blocked and tries < self.block_retries:
            meta = {k: v for k, v in request.meta.items() if k not in ("proxy", "egressd_lease")}
            meta["egressd_block_retries"] = tries + 1
            return request.replace(meta=meta, dont_filter=True)
        return response

    def process_exception(self, request, exception, spider):
        lease = request.meta.get("egressd_lease")
        if lease is not None and self.mode == "request" and self._drop(lease, request):
            self._in_thread(spider, "release", self.client.release, lease["id"])
        return None

    # -- helpers -----------------------------------------------------------------------------

    def _acquire_body(self, request, key):
        body = {"ttlSeconds": self.ttl, **self.acquire_fields, **request.meta.get("egressd_acquire", {})}
        body.setdefault("target", urlparse(request.url).hostname)
        if key is not None:
            body.setdefault("sticky", "scrapy-" + key)
        return body

    def _acquire(self, body):
        """In a thread: acquire, the service holding the request until a slot frees
        (waitSeconds, first come first served) up to EGRESSD_ACQUIRE_WAIT; retrying 429 (this
        crawler holds its limit of leases, maxPerHolder: one frees when a lease is released)
        and 500 (a failure on the service's side, such as a NATS election, which it says to
        retry) within the same time."""
        deadline = time.monotonic() + self.acquire_wait
        asked = "waitSeconds" in body  # EGRESSD_ACQUIRE may set its own
        # One request ID for every try: a try that was granted though its answer was lost
        # answers the next one (docs/leases.md#retries).
        body.setdefault("requestId", uuid.uuid4().hex)
        wait = 0.25
        while True:
            if not asked:
                body["waitSeconds"] = max(0, int(deadline - time.monotonic()))
            try:
                return self.client.acquire(**body)
            except LeaseError as e:
                retry = e.code in (429, 500) or (e.code == 503 and not body.get("waitSeconds"))
                if not retry or time.monotonic() + wait > deadline:
                    raise
            time.sleep(wait)
            wait = min(wait * 2, 4.0)

    def _granted(self, lease):
        self.active[lease["id"]] = lease
        self.renew_at[lease["id"]] = time.monotonic() + max(1.0, lease.get("ttlSeconds", self.ttl) / 3)
        self.stats.inc_value("egressd/leases")
        return lease

    def _session_granted(self, lease, key):
        self.sessions[key] = self._granted(lease)
        for d in self.waiting.pop(key, []):
            d.callback(lease)

    def _session_failed(self, failure, key):
        for d in self.waiting.pop(key, []):
            d.errback(failure)

    def _apply(self, lease, request):
        request.meta["proxy"] = lease["url"]
        request.meta["egressd_lease"] = lease
        return None

    def _drop(self, lease, request):
        """Forgets the lease (its session's too); False if it was forgotten already."""
        self.renew_at.pop(lease["id"], None)
        if self.active.pop(lease["id"], None) is None:
            return False
        key = str(request.meta.get("egressd_session", "default"))
        if self.sessions.get(key, {}).get("id") == lease["id"]:
            del self.sessions[key]
        return True

    def _has_marker(self, response):
        if not self.block_markers:
            return False
        body = response.body.lower()
        return any(m in body for m in self.block_markers)

    def _renew_due(self, spider):
        now = time.monotonic()
        for lease in list(self.active.values()):
            if self.renew_at.get(lease["id"], 0) > now:
                continue
            self.renew_at[lease["id"]] = now + max(1.0, lease.get("ttlSeconds", self.ttl) / 3)
            d = threads.deferToThread(self.client.renew, lease["id"])
            d.addCallbacks(self._renewed, self._renew_failed, errbackArgs=(lease, spider))

    def _renewed(self, lease):
        """Keeps the renewal's lease: with lease-bound credentials (auth mode lease) its url
        carries a fresh token, which the next requests must use."""
        if lease["id"] not in self.active:
            return  # released or blocked meanwhile
        self.stats.inc_value("egressd/renewed")
        self.active[lease["id"]] = lease
        for key, held in list(self.sessions.items()):
            if held["id"] == lease["id"]:
                self.sessions[key] = lease

    def _renew_failed(self, failure, lease, spider):
        if failure.check(LeaseError) and failure.value.code in _GONE:
            self.active.pop(lease["id"], None)
            self.renew_at.pop(lease["id"], None)
            for key, held in list(self.sessions.items()):
                if held["id"] == lease["id"]:
                    del self.sessions[key]
        spider.logger.warning("egressd: renewing lease %s: %s", lease["id"], failure.value)

    def _in_thread(self, spider, what, fn, *args):
        d = threads.deferToThread(fn, *args)
        d.addErrback(lambda f: spider.logger.warning("egressd: %s %s: %s", what, args[0], f.value))
        return d
