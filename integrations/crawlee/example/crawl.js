// An example crawler: every page of a site, through egressd leases, one per Crawlee session.
//   START_URL=http://127.0.0.1:8000/ node example/crawl.js
// NATS_URL (default nats://127.0.0.1:4222) is egressd's NATS; EGRESSD_ACQUIRE is JSON merged
// into every acquire, e.g. '{"selector":{"pool":"web"}}'; EGRESSD_BLOCK_COOLDOWN the seconds a
// blocked proxy cools down for the site (default: the service's 10 minutes).
import { CheerioCrawler, Configuration } from 'crawlee';
import { EgressdProxyConfiguration } from 'egressd-crawlee'; // this package, by its own name

const proxyConfiguration = new EgressdProxyConfiguration({
  holder: process.env.EGRESSD_HOLDER || 'crawlee-example',
  acquire: JSON.parse(process.env.EGRESSD_ACQUIRE || '{}'),
  cooldownSeconds: Number(process.env.EGRESSD_BLOCK_COOLDOWN || 0) || undefined, // the service's
});
const crawler = new CheerioCrawler({
  proxyConfiguration,
  postNavigationHooks: [proxyConfiguration.postNavigationHook],
  sessionPoolOptions: { maxPoolSize: 3 }, // at most this many leases at once
  maxRequestRetries: 1,
  async requestHandler(ctx) {
    const { request, $, enqueueLinks, proxyInfo, session, log } = ctx;
    const title = $('title').text();
    log.info(`fetched ${request.url} via ${new URL(proxyInfo.url).host}: ${title}`);
    if (/captcha/i.test(title)) {
      // A block only the page shows: retiring the session reports it and lets its lease go.
      session.retire();
      log.info(`reported blocked (captcha): ${request.url}`);
      return;
    }
    await enqueueLinks({ strategy: 'same-origin' });
  },
}, new Configuration({ persistStorage: false }));
try {
  await crawler.run([process.env.START_URL]);
} finally {
  await proxyConfiguration.close(); // every lease given back
}
