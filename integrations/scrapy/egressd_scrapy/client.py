"""A blocking client of the lease service's HTTP face, standard library only."""

import json
import urllib.error
import urllib.request


class LeaseError(Exception):
    """An error answer of the lease service: code 400, 401, 404, 409, 410, 413, 429, 503 or 500,
    with the message, the field at fault and, for 503, the availability numbers. It never
    carries the bearer token."""

    def __init__(self, code, message, field=None, availability=None):
        super().__init__(f"lease service: {code}: {message}")
        self.code = code
        self.field = field
        self.availability = availability


class LeaseClient:
    """POST /v1/leases/<endpoint> with the crawler's bearer token; each call returns the
    decoded reply or raises LeaseError (OSError when the service cannot be reached)."""

    def __init__(self, base_url, token, timeout=10.0, cafile=None):
        if not token:
            raise ValueError("egressd: a bearer token is required (EGRESSD_LEASE_TOKEN)")
        self.base_url = base_url.rstrip("/")
        self._auth = "Bearer " + token
        self.timeout = timeout
        handlers = [urllib.request.ProxyHandler({})]  # to the leaser directly, whatever $http_proxy says
        if cafile:
            import ssl

            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile)))
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self):  # never the token
        return f"LeaseClient({self.base_url!r})"

    def call(self, endpoint, body):
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
            raise LeaseError(e.code, detail.get("message", e.reason), detail.get("field"), detail.get("availability")) from None

    def acquire(self, **fields):
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
