// Fetches URL through the gateway with undici's ProxyAgent, as a Node crawler would:
// node fetch.mjs URL PROXY-URL CA-FILE. Prints the status and the body.
import { readFileSync } from "node:fs";
import { ProxyAgent, fetch } from "undici";

const [url, proxy, caFile] = process.argv.slice(2);
const p = new URL(proxy);
const token = "Basic " + Buffer.from(`${decodeURIComponent(p.username)}:${decodeURIComponent(p.password)}`).toString("base64");
const dispatcher = new ProxyAgent({ uri: `${p.protocol}//${p.host}`, token, requestTls: { ca: readFileSync(caFile) } });
const res = await fetch(url, { dispatcher });
console.log(res.status, await res.text());
await dispatcher.close();
