// An example crawler: every page of a site, through egressd leases, one per Crawlee session.
//   START_URL=http://127.0.0.1:8000/ node example/crawl.js
// NATS_URL (default nats://127.0.0.1:4222) is egressd's NATS; EGRESSD_ACQUIRE is JSON merged
// into every acquire, e.g. '{"selector":{"pool":"web"}}'.
import { CheerioCrawler, Configuration } from 'crawlee';
import { EgressdProxyConfiguration } from '../index.js';

const proxyConfiguration = new EgressdProxyConfiguration({
  holder: process.env.EGRESSD_HOLDER || 'crawlee-example',
  acquire: JSON.parse(process.env.EGRESSD_ACQUIRE || '{}'),
});
const crawler = new CheerioCrawler({
  proxyConfiguration,
  postNavigationHooks: [proxyConfiguration.postNavigationHook],
  sessionPoolOptions: { maxPoolSize: 3 }, // at most this many leases at once
  maxRequestRetries: 1,
  async requestHandler({ request, $, enqueueLinks, proxyInfo, log }) {
    log.info(`fetched ${request.url} via ${new URL(proxyInfo.url).host}: ${$('title').text()}`);
    await enqueueLinks({ strategy: 'same-origin' });
  },
}, new Configuration({ persistStorage: false }));
try {
  await crawler.run([process.env.START_URL]);
} finally {
  await proxyConfiguration.close(); // every lease given back
}
