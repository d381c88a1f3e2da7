package schemas

import "strings"

// specCase is one document and the fields ParseProxySpec must name, in order; none means the
// document is valid. schemaGap marks a document whose problem JSON Schema cannot express (see
// "$comment" in proxyspec.v1.json), so the schema agreement test skips it.
type specCase struct {
	name      string
	doc       string
	fields    []string
	schemaGap bool
}

func want(fields ...string) []string { return fields }

var (
	long57  = strings.Repeat("a", 57)
	long63  = strings.Repeat("a", 63)
	long64  = strings.Repeat("a", 64)
	long256 = strings.Repeat("é", 256)
	long257 = strings.Repeat("v", 257)
)

// specCases feed the table tests, the schema agreement test and the fuzz corpus.
var specCases = []specCase{
	// Valid documents.
	{name: "minimal managed", doc: `{"provider":"kvm-home"}`},
	{name: "design example", doc: `{"v":1,"mode":"managed","provider":"kvm-home",
		"placement":{"zone":"beelink","machineType":"small","image":"debian-13","region":""},
		"port":3128,"cloudInit":"#cloud-config\n","auth":{"username":"crawler","password":"pw"},
		"attributes":{"geo":"home","tier":"general"},"maxLeases":1,
		"healthCheck":{"intervalSeconds":30,"timeoutSeconds":5,"failureThreshold":3,"successThreshold":1,"url":""}}`},
	{name: "cloudInitRef", doc: `{"provider":"kvm-home","cloudInitRef":"crawl-squid"}`},
	{name: "cloudInitRef with dots and slashes", doc: `{"provider":"p","cloudInitRef":"a.b/c_d=E-1"}`},
	{name: "empty cloudInit beside cloudInitRef", doc: `{"provider":"p","cloudInit":"","cloudInitRef":"x"}`},
	{name: "empty mode is managed", doc: `{"mode":"","provider":"p"}`},
	{name: "zero port is the default", doc: `{"provider":"p","port":0}`},
	{name: "drained", doc: `{"provider":"p","maxLeases":0}`},
	{name: "limits", doc: `{"provider":"` + long63 + `","port":65535,"maxLeases":10000,
		"attributes":{"` + long63 + `":"` + long256 + `"},
		"healthCheck":{"intervalSeconds":3600,"timeoutSeconds":3600,"failureThreshold":100,"successThreshold":100}}`},
	{name: "empty attributes", doc: `{"provider":"p","attributes":{}}`},
	{name: "short interval caps the default timeout", doc: `{"provider":"p","healthCheck":{"intervalSeconds":3}}`},
	{name: "health url", doc: `{"provider":"p","healthCheck":{"url":"HTTPS://user@example.com:8443/x?y#z"}}`},
	{name: "escaped key", doc: `{"pro\u0076ider":"p"}`},
	{name: "external", doc: `{"mode":"external","endpoint":{"host":"10.0.0.5"}}`},
	{name: "require elite", doc: `{"provider":"p","healthCheck":{"requireAnonymity":"elite"}}`},
	{name: "require anonymous", doc: `{"provider":"p","healthCheck":{"requireAnonymity":"anonymous"}}`},
	{name: "require none", doc: `{"provider":"p","healthCheck":{"requireAnonymity":"none"}}`},
	{name: "require empty is none", doc: `{"provider":"p","healthCheck":{"requireAnonymity":""}}`},
	{name: "expected egress IPv4", doc: `{"mode":"external","endpoint":{"host":"proxy.example.com","expectedEgress":"192.0.2.7"}}`},
	{name: "expected egress IPv6", doc: `{"mode":"external","endpoint":{"host":"h","port":8080,"expectedEgress":"2001:db8::7"}}`},
	{name: "expected egress empty is unchecked", doc: `{"mode":"external","endpoint":{"host":"h","expectedEgress":""}}`},
	{name: "auth lease", doc: `{"provider":"p","auth":{"mode":"lease"}}`},
	{name: "auth lease external", doc: `{"mode":"external","endpoint":{"host":"h"},"auth":{"mode":"lease"}}`},
	{name: "auth static", doc: `{"provider":"p","auth":{"mode":"static","username":"u","password":"p"}}`},
	{name: "auth empty mode is static", doc: `{"provider":"p","auth":{"mode":"","username":"u","password":"p"}}`},
	{name: "member", doc: `{"provider":"p","pool":"de-fleet","drain":false}`},
	{name: "lifetime", doc: `{"provider":"p","maxLifetimeSeconds":86400}`},
	{name: "lifetime bounds", doc: `{"provider":"p","maxLifetimeSeconds":10}`},
	{name: "lifetime a year", doc: `{"provider":"p","maxLifetimeSeconds":31536000}`},
	{name: "lifetime zero is the default", doc: `{"mode":"external","endpoint":{"host":"h"},"maxLifetimeSeconds":0}`},
	{name: "draining member", doc: `{"provider":"p","pool":"` + long57 + `","drain":true}`},
	{name: "drained by hand", doc: `{"mode":"external","endpoint":{"host":"h"},"drain":true,"pool":""}`},
	{name: "external in full", doc: `{"v":1,"mode":"external","port":8080,"endpoint":{"host":"proxy.example.com","port":3129},
		"auth":{"username":"u","password":"p"},"attributes":{"geo":"de"},"placement":{},"provider":"","cloudInit":""}`},

	// Not JSON, or not one object.
	{name: "empty", doc: ``, fields: want("(document)")},
	{name: "truncated", doc: `{"provider":"p"`, fields: want("(document)")},
	{name: "syntax", doc: `{"provider":"p",}`, fields: want("(document)")},
	{name: "trailing value", doc: `{"provider":"p"} {}`, fields: want("(document)")},
	{name: "trailing garbage", doc: `{"provider":"p"} x`, fields: want("(document)")},
	{name: "trailing brace", doc: `{"provider":"p"}}`, fields: want("(document)")},
	{name: "trailing bracket", doc: `{"provider":"p"}]`, fields: want("(document)")},
	{name: "null document", doc: `null`, fields: want("(document)")},
	{name: "array document", doc: `[]`, fields: want("(document)")},
	{name: "string document", doc: `"p"`, fields: want("(document)")},

	// Wrong types name the field.
	{name: "port string", doc: `{"provider":"p","port":"3128"}`, fields: want("port")},
	{name: "port fraction", doc: `{"provider":"p","port":1.5}`, fields: want("port")},
	{name: "port written as float", doc: `{"provider":"p","port":3128.0}`, fields: want("port"), schemaGap: true},
	{name: "port huge", doc: `{"provider":"p","port":99999999999999999999}`, fields: want("port")},
	{name: "maxLeases string", doc: `{"provider":"p","maxLeases":"1"}`, fields: want("maxLeases")},
	{name: "mode number", doc: `{"provider":"p","mode":1}`, fields: want("mode")},
	{name: "v string", doc: `{"provider":"p","v":"1"}`, fields: want("v")},
	{name: "placement zone number", doc: `{"provider":"p","placement":{"zone":5}}`, fields: want("placement.zone")},
	{name: "healthCheck array", doc: `{"provider":"p","healthCheck":[]}`, fields: want("healthCheck")},
	{name: "interval string", doc: `{"provider":"p","healthCheck":{"intervalSeconds":"30"}}`, fields: want("healthCheck.intervalSeconds")},
	{name: "endpoint host number", doc: `{"mode":"external","endpoint":{"host":5}}`, fields: want("endpoint.host")},
	{name: "auth string", doc: `{"provider":"p","auth":"u:p"}`, fields: want("auth")},
	{name: "cloudInit object", doc: `{"provider":"p","cloudInit":{}}`, fields: want("cloudInit")},

	// Unknown fields, with their full path; case matters.
	{name: "unknown top level", doc: `{"provider":"p","foo":1}`, fields: want("foo")},
	{name: "unknown in healthCheck", doc: `{"provider":"p","healthCheck":{"bar":1}}`, fields: want("healthCheck.bar")},
	{name: "unknown in placement", doc: `{"provider":"p","placement":{"zone":"z","foo":"x"}}`, fields: want("placement.foo")},
	{name: "unknown in auth", doc: `{"provider":"p","auth":{"username":"u","password":"p","x":1}}`, fields: want("auth.x")},
	{name: "unknown in endpoint", doc: `{"mode":"external","endpoint":{"host":"h","y":1}}`, fields: want("endpoint.y")},
	{name: "unknown before a type error", doc: `{"foo":1,"port":"x"}`, fields: want("foo", "port")},

	// Every problem at once: the keys, then what validation finds in the rest.
	{name: "every unknown key", doc: `{"foo":1,"provider":"p","bar":{"x":null}}`, fields: want("foo", "bar")},
	{name: "unknown key and an invalid value", doc: `{"prot":3128,"port":70000,"provider":"p"}`, fields: want("prot", "port")},
	{name: "null and invalid values", doc: `{"provider":null,"maxLeases":-1,"healthCheck":{"url":"x"}}`, fields: want("provider", "maxLeases", "healthCheck.url")},
	{name: "repeated key and an invalid value", doc: `{"provider":"p","provider":"q","port":0,"maxLeases":20000}`, fields: want("provider", "maxLeases")},
	{name: "wrong case top level", doc: `{"Provider":"p"}`, fields: want("Provider")},
	{name: "wrong case nested", doc: `{"provider":"p","healthCheck":{"IntervalSeconds":3}}`, fields: want("healthCheck.IntervalSeconds")},

	// Null and repeated keys.
	{name: "null port", doc: `{"provider":"p","port":null}`, fields: want("port")},
	{name: "null endpoint", doc: `{"provider":"p","endpoint":null}`, fields: want("endpoint")},
	{name: "null attribute", doc: `{"provider":"p","attributes":{"a":null}}`, fields: want("attributes.a")},
	{name: "repeated key", doc: `{"provider":"p","provider":"q"}`, fields: want("provider"), schemaGap: true},
	{name: "repeated nested key", doc: `{"provider":"p","auth":{"username":"u","password":"a","password":"b"}}`, fields: want("auth.password"), schemaGap: true},

	// Version.
	{name: "version 2", doc: `{"v":2,"provider":"p"}`, fields: want("v")},
	{name: "version 2 with new fields", doc: `{"v":2,"provider":"p","pool":"x"}`, fields: want("v")},
	{name: "version 0", doc: `{"v":0,"provider":"p"}`, fields: want("v")},
	{name: "version -1", doc: `{"v":-1,"provider":"p"}`, fields: want("v")},

	// Port, mode, lease limit.
	{name: "port negative", doc: `{"provider":"p","port":-1}`, fields: want("port")},
	{name: "port too big", doc: `{"provider":"p","port":65536}`, fields: want("port")},
	{name: "mode unknown", doc: `{"mode":"bogus","provider":"p"}`, fields: want("mode")},
	{name: "mode wrong case", doc: `{"mode":"Managed","provider":"p"}`, fields: want("mode")},
	{name: "maxLeases negative", doc: `{"provider":"p","maxLeases":-1}`, fields: want("maxLeases")},
	{name: "maxLeases too big", doc: `{"provider":"p","maxLeases":10001}`, fields: want("maxLeases")},

	// Lifetime.
	{name: "lifetime too short", doc: `{"provider":"p","maxLifetimeSeconds":9}`, fields: want("maxLifetimeSeconds")},
	{name: "lifetime negative", doc: `{"provider":"p","maxLifetimeSeconds":-1}`, fields: want("maxLifetimeSeconds")},
	{name: "lifetime over a year", doc: `{"provider":"p","maxLifetimeSeconds":31536001}`, fields: want("maxLifetimeSeconds")},
	{name: "lifetime string", doc: `{"provider":"p","maxLifetimeSeconds":"60"}`, fields: want("maxLifetimeSeconds")},
	{name: "lifetime fraction", doc: `{"provider":"p","maxLifetimeSeconds":60.5}`, fields: want("maxLifetimeSeconds")},
	{name: "lifetime null", doc: `{"provider":"p","maxLifetimeSeconds":null}`, fields: want("maxLifetimeSeconds")},
	{name: "lifetime on an external proxy", doc: `{"mode":"external","endpoint":{"host":"h"},"maxLifetimeSeconds":60}`, fields: want("maxLifetimeSeconds")},

	// Owner and drain.
	{name: "pool uppercase", doc: `{"provider":"p","pool":"Fleet"}`, fields: want("pool")},
	{name: "pool too long for a member name", doc: `{"provider":"p","pool":"` + long57 + `a"}`, fields: want("pool")},
	{name: "pool number", doc: `{"provider":"p","pool":1}`, fields: want("pool")},
	{name: "drain string", doc: `{"provider":"p","drain":"true"}`, fields: want("drain")},
	{name: "drain null", doc: `{"provider":"p","drain":null}`, fields: want("drain")},
	{name: "drain miscased", doc: `{"provider":"p","Drain":true}`, fields: want("Drain")},

	// Managed mode.
	{name: "no provider", doc: `{}`, fields: want("provider")},
	{name: "empty provider", doc: `{"provider":""}`, fields: want("provider")},
	{name: "provider uppercase", doc: `{"provider":"Kvm"}`, fields: want("provider")},
	{name: "provider underscore", doc: `{"provider":"a_b"}`, fields: want("provider")},
	{name: "provider too long", doc: `{"provider":"` + long64 + `"}`, fields: want("provider")},
	{name: "endpoint in managed", doc: `{"provider":"p","endpoint":{"host":"h"}}`, fields: want("endpoint")},
	{name: "cloudInit and cloudInitRef", doc: `{"provider":"p","cloudInit":"#cloud-config","cloudInitRef":"x"}`, fields: want("cloudInitRef")},
	{name: "cloudInitRef with space", doc: `{"provider":"p","cloudInitRef":"a b"}`, fields: want("cloudInitRef")},
	{name: "cloudInitRef leading dot", doc: `{"provider":"p","cloudInitRef":".a"}`, fields: want("cloudInitRef")},
	{name: "cloudInitRef double dot", doc: `{"provider":"p","cloudInitRef":"a..b"}`, fields: want("cloudInitRef")},

	// External mode.
	{name: "external without endpoint", doc: `{"mode":"external"}`, fields: want("endpoint.host")},
	{name: "external empty endpoint", doc: `{"mode":"external","endpoint":{}}`, fields: want("endpoint.host")},
	{name: "external host with space", doc: `{"mode":"external","endpoint":{"host":"a b"}}`, fields: want("endpoint.host")},
	{name: "external host is a URL", doc: `{"mode":"external","endpoint":{"host":"http://h"}}`, fields: want("endpoint.host")},
	{name: "external host with credentials", doc: `{"mode":"external","endpoint":{"host":"u:pw@h"}}`, fields: want("endpoint.host")},
	{name: "external endpoint port", doc: `{"mode":"external","endpoint":{"host":"h","port":65536}}`, fields: want("endpoint.port")},
	{name: "external endpoint port negative", doc: `{"mode":"external","endpoint":{"host":"h","port":-1}}`, fields: want("endpoint.port")},
	{name: "external with provider", doc: `{"mode":"external","provider":"p","endpoint":{"host":"h"}}`, fields: want("provider")},
	{name: "external with placement", doc: `{"mode":"external","placement":{"image":"i"},"endpoint":{"host":"h"}}`, fields: want("placement")},
	{name: "external with cloudInit", doc: `{"mode":"external","cloudInit":"x","endpoint":{"host":"h"}}`, fields: want("cloudInit")},
	{name: "external with cloudInitRef", doc: `{"mode":"external","cloudInitRef":"x","endpoint":{"host":"h"}}`, fields: want("cloudInitRef")},
	{name: "external with everything wrong", doc: `{"mode":"external","provider":"p","placement":{"zone":"z"},"cloudInit":"x","cloudInitRef":"y"}`,
		fields: want("endpoint.host", "provider", "placement", "cloudInit", "cloudInitRef")},

	// Auth.
	{name: "auth empty", doc: `{"provider":"p","auth":{}}`, fields: want("auth.username", "auth.password")},
	{name: "auth username colon", doc: `{"provider":"p","auth":{"username":"a:b","password":"p"}}`, fields: want("auth.username")},
	{name: "auth username newline", doc: `{"provider":"p","auth":{"username":"a\nb","password":"p"}}`, fields: want("auth.username")},
	{name: "auth no password", doc: `{"provider":"p","auth":{"username":"u"}}`, fields: want("auth.password")},
	{name: "auth lease with username", doc: `{"provider":"p","auth":{"mode":"lease","username":"u"}}`, fields: want("auth.username")},
	{name: "auth lease with password", doc: `{"provider":"p","auth":{"mode":"lease","password":"p"}}`, fields: want("auth.password")},
	{name: "auth lease with both", doc: `{"provider":"p","auth":{"mode":"lease","username":"u","password":"p"}}`, fields: want("auth.username", "auth.password")},
	{name: "auth lease with empty strings", doc: `{"provider":"p","auth":{"mode":"lease","username":"","password":""}}`},
	{name: "auth unknown mode", doc: `{"provider":"p","auth":{"mode":"token"}}`, fields: want("auth.mode")},
	{name: "auth mode case", doc: `{"provider":"p","auth":{"mode":"Lease"}}`, fields: want("auth.mode")},
	{name: "auth mode number", doc: `{"provider":"p","auth":{"mode":1}}`, fields: want("auth.mode")},
	{name: "auth static without password", doc: `{"provider":"p","auth":{"mode":"static","username":"u"}}`, fields: want("auth.password")},

	// Attributes.
	{name: "attribute empty key", doc: `{"provider":"p","attributes":{"":"x"}}`, fields: want("attributes")},
	{name: "attribute long key", doc: `{"provider":"p","attributes":{"` + long64 + `":"x"}}`, fields: want("attributes")},
	{name: "attribute long values in key order", doc: `{"provider":"p","attributes":{"b":"` + long257 + `","a":"` + long257 + `"}}`,
		fields: want("attributes.a", "attributes.b")},

	// Health check.
	{name: "interval negative", doc: `{"provider":"p","healthCheck":{"intervalSeconds":-1}}`, fields: want("healthCheck.intervalSeconds")},
	{name: "interval too big", doc: `{"provider":"p","healthCheck":{"intervalSeconds":3601}}`, fields: want("healthCheck.intervalSeconds")},
	{name: "timeout above interval", doc: `{"provider":"p","healthCheck":{"intervalSeconds":5,"timeoutSeconds":6}}`,
		fields: want("healthCheck.timeoutSeconds"), schemaGap: true},
	{name: "timeout negative", doc: `{"provider":"p","healthCheck":{"timeoutSeconds":-1}}`, fields: want("healthCheck.timeoutSeconds")},
	{name: "interval and timeout too big", doc: `{"provider":"p","healthCheck":{"intervalSeconds":3601,"timeoutSeconds":3601}}`,
		fields: want("healthCheck.intervalSeconds", "healthCheck.timeoutSeconds")},
	{name: "failureThreshold", doc: `{"provider":"p","healthCheck":{"failureThreshold":101}}`, fields: want("healthCheck.failureThreshold")},
	{name: "successThreshold", doc: `{"provider":"p","healthCheck":{"successThreshold":-1}}`, fields: want("healthCheck.successThreshold")},
	{name: "url scheme", doc: `{"provider":"p","healthCheck":{"url":"ftp://h/"}}`, fields: want("healthCheck.url")},
	{name: "url relative", doc: `{"provider":"p","healthCheck":{"url":"/healthz"}}`, fields: want("healthCheck.url")},
	{name: "url without host", doc: `{"provider":"p","healthCheck":{"url":"http://"}}`, fields: want("healthCheck.url")},
	{name: "url that does not parse", doc: `{"provider":"p","healthCheck":{"url":"http://a b/"}}`, fields: want("healthCheck.url"), schemaGap: true},
	{name: "requireAnonymity unknown", doc: `{"provider":"p","healthCheck":{"requireAnonymity":"high"}}`, fields: want("healthCheck.requireAnonymity")},
	{name: "requireAnonymity miscased", doc: `{"provider":"p","healthCheck":{"requireAnonymity":"Elite"}}`, fields: want("healthCheck.requireAnonymity")},
	{name: "requireAnonymity transparent is no requirement", doc: `{"provider":"p","healthCheck":{"requireAnonymity":"transparent"}}`, fields: want("healthCheck.requireAnonymity")},
	{name: "requireAnonymity a number", doc: `{"provider":"p","healthCheck":{"requireAnonymity":3}}`, fields: want("healthCheck.requireAnonymity")},
	{name: "requireAnonymity null", doc: `{"provider":"p","healthCheck":{"requireAnonymity":null}}`, fields: want("healthCheck.requireAnonymity")},

	// Expected egress: an IP address, not a host name or an address with a port.
	{name: "expectedEgress a host name", doc: `{"mode":"external","endpoint":{"host":"h","expectedEgress":"proxy.example.com"}}`,
		fields: want("endpoint.expectedEgress"), schemaGap: true},
	{name: "expectedEgress with a port", doc: `{"mode":"external","endpoint":{"host":"h","expectedEgress":"192.0.2.7:3128"}}`,
		fields: want("endpoint.expectedEgress"), schemaGap: true},
	{name: "expectedEgress a number", doc: `{"mode":"external","endpoint":{"host":"h","expectedEgress":7}}`, fields: want("endpoint.expectedEgress")},

	// Several problems are all reported, in a stable order.
	{name: "several problems", doc: `{"provider":"A","port":70000,"maxLeases":-1,"healthCheck":{"failureThreshold":-3}}`,
		fields: want("port", "provider", "maxLeases", "healthCheck.failureThreshold")},
}
