// egressd for Crawlee: a ProxyConfiguration whose proxies are leases of egressd's lease
// service, requested over NATS (docs/leases.md). One lease per Crawlee session: the session's
// ID is the lease's sticky key, so a session keeps its proxy; a blocked response is reported
// (the proxy cools down for that site) and the session's lease given back; every lease still
// held is released by close().
import { ProxyConfiguration } from 'crawlee';
import { randomUUID } from 'node:crypto';
import { connect, ErrorCode, headers, StringCodec } from 'nats';

const sc = StringCodec();

/** An error answer of the lease service: code is 400, 404, 409, 410, 429, 503 or 500. */
export class LeaseError extends Error {
  constructor(detail) {
    super(`lease service: ${detail.code}: ${detail.message}`);
    this.name = 'LeaseError';
    this.code = detail.code;
    this.field = detail.field;
    this.availability = detail.availability;
    this.wait = detail.wait; // after waitSeconds: how long it waited, its place, why it stopped
    this.retry = !!detail.retry; // the service's hint: its side failed, the same request may succeed
  }
}

/**
 * Whether the same request sent again may mend err: nobody answering (a leaser restarting), a
 * timeout (a reply lost, a node lost), or the service's retry hint (500, a replica that
 * stopped while the acquire waited). Never a refusal: 400, 404, 409, 410, 429, or 503 "no
 * proxy available".
 */
export function retryable(err) {
  if (err instanceof LeaseError) return err.retry || err.code === 500;
  return err?.code === ErrorCode.NoResponders || err?.code === ErrorCode.Timeout;
}

/**
 * A Crawlee ProxyConfiguration backed by egressd leases.
 *
 * Options:
 * - `servers` (default `$NATS_URL` or nats://127.0.0.1:4222) or `connection` (an open
 *   nats.js connection, which close() then leaves open); `natsOptions` go to connect()
 *   (user, pass, inboxPrefix on a shared cluster: deploy/README.md).
 * - `holder` (default "crawlee"), `ttlSeconds` (default 300; renewed at a third of it).
 * - `acquire`: any further fields of the acquire request (selector, minAnonymity, and
 *   whatever the service learns later), merged into every acquire as they are.
 * - `stickyPrefix` (default "crawlee-"): sticky key = prefix + session ID.
 * - `blockedStatusCodes` (default [403, 429]): responses reported as `blocked`;
 *   `cooldownSeconds` (default: the service's) for those reports.
 * - `acquireWaitMillis` (default 30000): how long an acquire may wait for a slot. The service
 *   holds it (waitSeconds, first come first served) until a matching proxy frees one; a 429
 *   (at its holder limit) or 500 (retry) is retried within the same time. Then the request
 *   fails (Crawlee retries it). At most the leaser's leases.maxWaitSeconds (60 by default).
 * - `requestTimeoutMillis` (default 5000) for each request to the service.
 * - `retryBudgetMillis` (default 10000): how long a request is tried again, with backoff,
 *   after a failure another try may mend (retryable). Every request is safe to send again:
 *   an acquire carries a requestId (one per acquire), the others act on a lease ID.
 */
export class EgressdProxyConfiguration extends ProxyConfiguration {
  constructor(options = {}) {
    // ProxyConfiguration takes only its own options; ours are kept here.
    super({ newUrlFunction: (sessionId, opts) => this.#leaseUrl(sessionId, opts?.request) });
    this.options = {
      servers: process.env.NATS_URL || 'nats://127.0.0.1:4222',
      holder: 'crawlee',
      ttlSeconds: 300,
      acquire: {},
      stickyPrefix: 'crawlee-',
      blockedStatusCodes: [403, 429],
      acquireWaitMillis: 30000,
      requestTimeoutMillis: 5000,
      retryBudgetMillis: 10000,
      ...options,
    };
    this.#nc = options.connection;
    this.#ownConnection = !options.connection;
    /** The hook to put in the crawler's postNavigationHooks: it reports blocked responses. */
    this.postNavigationHook = (ctx) => this.#afterNavigation(ctx);
  }

  #nc;
  #ownConnection;
  #connecting;
  #closed = false;
  #sessions = new Map(); // session ID → {lease, timer}
  #pending = new Map(); // session ID → Promise of the lease being acquired
  #pools = new WeakSet(); // session pools whose retirements we follow

  async #conn() {
    if (this.#closed) throw new Error('egressd: the proxy configuration is closed');
    if (this.#nc) return this.#nc;
    // A failed connect is not kept: the next request tries again.
    this.#connecting ??= connect({ servers: this.options.servers, ...this.options.natsOptions })
      .catch((err) => { this.#connecting = undefined; throw err; });
    this.#nc = await this.#connecting;
    return this.#nc;
  }

  /**
   * A request to the lease service, tried again within retryBudgetMillis after a failure
   * that another try may mend (retryable): the reply, or the last try's error.
   */
  async request(endpoint, body) {
    const deadline = Date.now() + this.options.retryBudgetMillis;
    for (let wait = 50; ; wait = Math.min(wait * 2, 1000)) {
      try {
        return await this.requestOnce(endpoint, body);
      } catch (err) {
        const pause = wait / 2 + Math.random() * (wait / 2);
        if (!retryable(err) || Date.now() + pause > deadline) throw err;
        await new Promise((resolve) => setTimeout(resolve, pause));
      }
    }
  }

  /**
   * One request to the lease service: the reply, or a LeaseError. An acquire with waitSeconds
   * listens that much longer, and tells the service how long it listens (docs/leases.md#waiting).
   */
  async requestOnce(endpoint, body) {
    const nc = await this.#conn();
    const opts = { timeout: this.options.requestTimeoutMillis + (body.waitSeconds || 0) * 1000 };
    if (body.waitSeconds) {
      opts.headers = headers();
      opts.headers.set('Egress-Reply-Timeout-Ms', String(opts.timeout));
    }
    const msg = await nc.request(`egress.lease.${endpoint}`, sc.encode(JSON.stringify(body)), opts);
    const data = msg.data.length ? JSON.parse(sc.decode(msg.data)) : {};
    if (msg.headers?.get('Nats-Service-Error-Code')) throw new LeaseError(data.error);
    return data;
  }

  async #leaseUrl(sessionId, request) {
    const key = sessionId ?? '';
    const held = this.#sessions.get(key);
    if (held) {
      if (request?.url) held.target = new URL(request.url).hostname;
      return held.lease.url;
    }
    // Concurrent requests of one session share one acquire.
    let p = this.#pending.get(key);
    if (!p) {
      p = this.#acquire(key, request).finally(() => this.#pending.delete(key));
      this.#pending.set(key, p);
    }
    return (await p).url;
  }

  async #acquire(key, request) {
    const o = this.options;
    const body = { holder: o.holder, ttlSeconds: o.ttlSeconds, ...o.acquire };
    if (key !== '') body.sticky = o.stickyPrefix + key;
    if (request?.url && body.target === undefined) body.target = new URL(request.url).hostname;
    const deadline = Date.now() + o.acquireWaitMillis;
    const asked = body.waitSeconds; // o.acquire may set its own
    // One request ID for every try: a try granted though its answer was lost answers the next
    // one with its lease instead of a second (docs/leases.md#retries).
    body.requestId ??= randomUUID();
    for (let wait = 250; ; wait = Math.min(wait * 2, 4000)) {
      // The service holds the acquire until a slot frees: no retry loop for "nothing free".
      if (asked === undefined) body.waitSeconds = Math.max(0, Math.floor((deadline - Date.now()) / 1000));
      try {
        const { lease } = await this.request('acquire', body);
        const timer = setInterval(() => this.#renew(key, lease), Math.max(1, lease.ttlSeconds / 3) * 1000);
        timer.unref();
        this.#sessions.set(key, { lease, timer, target: request?.url ? new URL(request.url).hostname : undefined });
        return lease;
      } catch (err) {
        // 503: nothing freed within the wait (or none was asked for); 429: this crawler holds
        // its limit (maxPerHolder) until one is released; 500: a failure on the service's side
        // (a NATS election), which it says to retry.
        const retry = err instanceof LeaseError && ([429, 500].includes(err.code) || (err.code === 503 && !body.waitSeconds));
        if (!retry || Date.now() + wait > deadline) throw err;
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  async #renew(key, lease) {
    try {
      const reply = await this.request('renew', { id: lease.id });
      // With lease-bound credentials (auth mode lease) the renewal's url carries a fresh
      // token: the session's next requests use it.
      const held = this.#sessions.get(key);
      if (held && held.lease.id === lease.id) held.lease = reply.lease;
    } catch (err) {
      // Refused (404, 409, 410): the lease is gone and the session gets a new one. Anything
      // else is retried at the next tick, well within the TTL.
      if (err instanceof LeaseError && [404, 409, 410].includes(err.code)) this.#forget(key, lease.id);
    }
  }

  #forget(key, id) {
    const held = this.#sessions.get(key);
    if (!held || (id && held.lease.id !== id)) return undefined;
    clearInterval(held.timer);
    this.#sessions.delete(key);
    return held.lease;
  }

  async #afterNavigation(ctx) {
    const { response, session } = ctx;
    if (session?.sessionPool && !this.#pools.has(session.sessionPool)) {
      // A session Crawlee retires (too many errors, used up) gives its lease back.
      this.#pools.add(session.sessionPool);
      session.sessionPool.on('sessionRetired', (s) => this.#retired(s).catch(() => {}));
    }
    if (this.options.blockedStatusCodes.includes(response?.statusCode)) await this.reportBlocked(ctx);
  }

  /**
   * A session Crawlee retires gives its lease back. Retired before it was used up or expired
   * (the crawler saw a blocked status, too many errors, or the requestHandler called
   * `session.retire()` on a captcha), it is a block: reported for the last site the session
   * fetched, so the proxy cools down there.
   */
  async #retired(session) {
    const held = this.#sessions.get(session.id);
    if (!held) return;
    const usedUp = session.isExpired?.() || session.isMaxUsageCountReached?.();
    if (usedUp || !held.target) {
      await this.release(session.id);
      return;
    }
    await this.#reportBlocked(session.id, held.target);
  }

  /**
   * Reports the session's proxy blocked for the request's site and gives its lease back; the
   * session's next request gets another proxy. For blocks only the page shows (a captcha),
   * retiring the session is enough (`session.retire()`); this is for reporting without it.
   */
  async reportBlocked({ request, session }) {
    await this.#reportBlocked(session?.id ?? '', new URL(request.url).hostname);
  }

  async #reportBlocked(key, target) {
    const lease = this.#forget(key);
    if (!lease) return;
    const report = { id: lease.id, result: 'blocked', target, release: true };
    if (this.options.cooldownSeconds) report.cooldownSeconds = this.options.cooldownSeconds;
    try {
      await this.request('report', report);
    } catch {
      // The lease may have ended meanwhile; it expires at its TTL at worst.
    }
  }

  /** Releases the lease of one session (Crawlee's session ID), if it holds one. */
  async release(sessionId) {
    const lease = this.#forget(sessionId ?? '');
    if (lease) await this.request('release', { id: lease.id });
  }

  /** The leases held now, by session ID: {id, proxy, url, …} as the service granted them. */
  leases() {
    return new Map([...this.#sessions].map(([k, v]) => [k, v.lease]));
  }

  /** Releases every lease and closes the NATS connection if it opened it. */
  async close() {
    await Promise.allSettled([...this.#pending.values()]);
    const keys = [...this.#sessions.keys()];
    const results = await Promise.allSettled(keys.map((k) => this.release(k)));
    this.#closed = true;
    if (this.#ownConnection && this.#nc) await this.#nc.drain();
    const failed = results.filter((r) => r.status === 'rejected');
    if (failed.length) throw new AggregateError(failed.map((r) => r.reason), `egressd: ${failed.length} leases not released`);
  }
}
