"""A blocking client of the lease service's HTTP face, standard library only."""

import json
import random
import time
import urllib.error
import urllib.request
import uuid


class LeaseError(Exception):
    """An error answer of the lease service: code 400, 401, 404, 409, 410, 413, 429, 503 or 500,
    with the message, the field at fault and, for 503, the availability numbers. It never
    carries the bearer token."""

    def __init__(self, code, message, field=None, availability=None, retry=False):
        super().__init__(f"lease service: {code}: {message}")
        self.code = code
        self.field = field
        self.availability = availability
        self.retry = retry  # the service's hint: its side failed, the same request may succeed


def retryable(err):
    """Whether the same request sent again may mend err: the service unreachable or slow (a
    leaser restarting, a timeout, a proxy in between answering 502/503/504 without a body),
    or the service's retry hint (500, a replica that stopped while the acquire waited).
    Never a refusal: 400, 401, 404, 409, 410, 413, 429, or 503 "no proxy available"."""
    if isinstance(err, LeaseError):
        return err.retry or err.code == 500
    return isinstance(err, (OSError, TimeoutError))


class LeaseClient:
    """POST /v1/leases/<endpoint> with the crawler's bearer token; each call returns the
    decoded reply or raises LeaseError (OSError when the service cannot be reached)."""

    def __init__(self, base_url, token, timeout=10.0, cafile=None, retry_budget=10.0):
        if not token:
            raise ValueError("egressd: a bearer token is required (EGRESSD_LEASE_TOKEN)")
        self.base_url = base_url.rstrip("/")
        self._auth = "Bearer " + token
        self.timeout = timeout
        self.retry_budget = retry_budget  # seconds a request is tried again after a retryable failure
        handlers = [urllib.request.ProxyHandler({})]  # to the leaser directly, whatever $http_proxy says
        if cafile:
            import ssl

            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile)))
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self):  # never the token
        return f"LeaseClient({self.base_url!r})"

    def call(self, endpoint, body):
        """A request, tried again with backoff within retry_budget after a failure that
        another try may mend (retryable). Every request is safe to send again: an acquire
        carries a requestId (acquire sets one), the others act on a lease ID
        (docs/leases.md#retries)."""
        deadline = time.monotonic() + self.retry_budget
        wait = 0.05
        while True:
            try:
                return self.call_once(endpoint, body)
            except (LeaseError, OSError) as e:
                pause = wait / 2 + random.uniform(0, wait / 2)
                if not retryable(e) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            wait = min(wait * 2, 1.0)

    def call_once(self, endpoint, body):
        """One request; an acquire with waitSeconds listens that much longer, and tells the
        service how long it listens (docs/leases.md#waiting)."""
        timeout = self.timeout + (body.get("waitSeconds") or 0)
        headers = {"Authorization": self._auth, "Content-Type": "application/json"}
        if body.get("waitSeconds"):
            headers["Egress-Reply-Timeout-Ms"] = str(int(timeout * 1000))
        req = urllib.request.Request(
            f"{self.base_url}/v1/leases/{endpoint}",
            data=json.dumps(body).encode(),
            headers=headers,
            method="POST",
        )
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                detail = json.loads(e.read()).get("error", {})
            except ValueError:
                detail = {}
            if not detail and e.code in (502, 503, 504):  # not the service's answer: something in between
                raise OSError(f"lease service: {e.code} {e.reason}") from None
            raise LeaseError(
                e.code, detail.get("message", e.reason), detail.get("field"), detail.get("availability"), detail.get("retry", False)
            ) from None

    def acquire(self, **fields):
        """Acquire with a requestId (a new one unless fields name one), so that a try whose
        answer was lost is answered with the same lease instead of a second."""
        fields.setdefault("requestId", uuid.uuid4().hex)
        return self.call("acquire", fields)["lease"]

    def renew(self, lease_id, ttl_seconds=None):
        body = {"id": lease_id}
        if ttl_seconds:
            body["ttlSeconds"] = ttl_seconds
        return self.call("renew", body)["lease"]

    def release(self, lease_id):
        return self.call("release", {"id": lease_id}).get("released", False)

    def report(self, lease_id, result, target=None, cooldown_seconds=None, release=False):
        body = {"id": lease_id, "result": result}
        if target:
            body["target"] = target
        if cooldown_seconds:
            body["cooldownSeconds"] = cooldown_seconds
        if release:
            body["release"] = True
        return self.call("report", body)
