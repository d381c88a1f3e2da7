// Loads a page through the gateway with Playwright, as a crawler's code would: the proxy's
// server, username and password in chromium.launch's proxy option. Debian's chromium stands
// in for Playwright's own download; loopback sites go through the proxy too (bypass), and
// the test origin's certificate is trusted by its key.
// usage: node fetch.mjs URL GATEWAY_HOST:PORT USERNAME PASSWORD SPKI_SHA256_BASE64
import { chromium } from "playwright-core";

const [url, gateway, username, password, spki] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", `--ignore-certificate-errors-spki-list=${spki}`],
  proxy: { server: `http://${gateway}`, username, password, bypass: "<-loopback>" },
  timeout: 20000,
});
try {
  const page = await browser.newPage();
  const resp = await page.goto(url, { timeout: 20000 });
  console.log(`${resp.status()} ${await page.innerText("body")}`);
} finally {
  await browser.close();
}
