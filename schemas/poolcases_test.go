package schemas

import (
	"fmt"
	"strings"
)

// tmpl is the smallest valid template; pool builds a spec with it and replicas 3 around the
// fields given.
const tmpl = `"template":{"provider":"p"}`

func pool(fields string) string {
	if fields == "" {
		return `{` + tmpl + `,"replicas":3}`
	}
	return `{` + tmpl + `,"replicas":3,` + fields + `}`
}

// manyPlacements is a list of n distinct placements.
func manyPlacements(n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf(`{"zone":"z%d"}`, i)
	}
	return `"placements":[` + strings.Join(ps, ",") + `]`
}

// poolCases are to ParsePoolSpec and poolspec.v1.json what specCases are to ParseProxySpec
// and proxyspec.v1.json.
var poolCases = []specCase{
	// Valid documents.
	{name: "minimal", doc: pool("")},
	{name: "no replicas wanted", doc: `{` + tmpl + `,"replicas":0}`},
	{name: "full", doc: `{"v":1,"template":{"v":1,"mode":"managed","provider":"kvm-home",
		"placement":{"region":"eu","zone":"beelink","machineType":"small","image":"debian-13"},
		"port":3128,"cloudInitRef":"crawl-squid","auth":{"username":"crawler","password":"pw"},
		"attributes":{"geo":"home"},"maxLeases":4,"pool":"","drain":false,
		"healthCheck":{"intervalSeconds":30,"timeoutSeconds":5,"failureThreshold":3,"successThreshold":1}},
		"replicas":10,
		"placements":[{"zone":"beelink"},{"zone":"nuc","machineType":"large"},{"provider":"cloud","region":"us","zone":"a","machineType":"m","image":"i"}],
		"spread":"least-loaded",
		"rotation":{"maxAgeSeconds":3600,"jitterSeconds":600,"maxSurge":2,"minAvailable":8,"drainTimeoutSeconds":300},
		"recycle":{"blockedTargets":5,"windowSeconds":1800}}`},
	{name: "upper limits", doc: `{` + tmpl + `,"replicas":1000,` + manyPlacements(100) + `,
		"rotation":{"maxAgeSeconds":31536000,"jitterSeconds":31535999,"maxSurge":1000,"minAvailable":1000,"drainTimeoutSeconds":86400},
		"recycle":{"blockedTargets":1000,"windowSeconds":604800}}`},
	{name: "lower limits", doc: pool(`"rotation":{"maxAgeSeconds":60,"jitterSeconds":59,"maxSurge":0,"minAvailable":0,"drainTimeoutSeconds":1},
		"recycle":{"blockedTargets":1,"windowSeconds":60}`)},
	{name: "long placement provider", doc: pool(`"placements":[{"provider":"` + long63 + `"}]`)},
	{name: "no surge takes one member down", doc: pool(`"rotation":{"maxSurge":0}`)},
	{name: "no surge, explicit minAvailable", doc: pool(`"rotation":{"maxSurge":0,"minAvailable":2}`)},
	{name: "no surge, no replicas", doc: `{` + tmpl + `,"replicas":0,"rotation":{"maxSurge":0,"minAvailable":0}}`},
	{name: "empty placements", doc: pool(`"placements":[]`)},
	{name: "template's own place", doc: pool(`"placements":[{}]`)},
	{name: "template's place and another", doc: pool(`"placements":[{},{"zone":"b"},{"provider":"q"}]`)},
	{name: "empty spread", doc: pool(`"spread":""`)},
	{name: "round-robin", doc: pool(`"spread":"round-robin"`)},
	{name: "empty rotation", doc: pool(`"rotation":{}`)},
	{name: "zero defaults", doc: pool(`"rotation":{"maxAgeSeconds":0,"jitterSeconds":0,"drainTimeoutSeconds":0},"recycle":{"blockedTargets":3,"windowSeconds":0}`)},
	{name: "empty template mode", doc: `{"template":{"mode":"","provider":"p"},"replicas":1}`},
	{name: "template drained by hand", doc: `{"template":{"provider":"p","maxLeases":0},"replicas":1}`},
	{name: "escaped key", doc: `{` + tmpl + `,"repl\u0069cas":1}`},

	// Not JSON, or not one object.
	{name: "empty", doc: ``, fields: want("(document)")},
	{name: "truncated", doc: `{` + tmpl + `,"replicas":3`, fields: want("(document)")},
	{name: "trailing data", doc: pool("") + ` {}`, fields: want("(document)")},
	{name: "null document", doc: `null`, fields: want("(document)")},
	{name: "array document", doc: `[` + pool("") + `]`, fields: want("(document)")},

	// The template: a managed ProxySpec, its errors under "template.".
	{name: "no template", doc: `{"replicas":1}`, fields: want("template.provider")},
	{name: "empty template", doc: `{"template":{},"replicas":1}`, fields: want("template.provider")},
	{name: "template provider invalid", doc: `{"template":{"provider":"P"},"replicas":1}`, fields: want("template.provider")},
	{name: "template lifetime too short", doc: `{"template":{"provider":"p","maxLifetimeSeconds":5},"replicas":1}`, fields: want("template.maxLifetimeSeconds")},
	{name: "template lifetime", doc: `{"template":{"provider":"p","maxLifetimeSeconds":3600},"replicas":1}`},
	{name: "template external", doc: `{"template":{"mode":"external","endpoint":{"host":"h"}},"replicas":1}`, fields: want("template.mode")},
	{name: "template external without endpoint", doc: `{"template":{"mode":"external"},"replicas":1}`,
		fields: want("template.endpoint.host", "template.mode")},
	{name: "template mode unknown", doc: `{"template":{"mode":"bogus","provider":"p"},"replicas":1}`, fields: want("template.mode")},
	{name: "template with owner", doc: `{"template":{"provider":"p","pool":"other"},"replicas":1}`, fields: want("template.pool")},
	{name: "template with an invalid owner", doc: `{"template":{"provider":"p","pool":"Not_A_Name"},"replicas":1}`, fields: want("template.pool")},
	{name: "template draining", doc: `{"template":{"provider":"p","drain":true},"replicas":1}`, fields: want("template.drain")},
	{name: "template drain string", doc: `{"template":{"provider":"p","drain":"true"},"replicas":1}`, fields: want("template.drain")},
	{name: "template pool attribute", doc: `{"template":{"provider":"p","attributes":{"geo":"de","pool":"x"}},"replicas":1}`,
		fields: want("template.attributes.pool")},
	{name: "template port", doc: `{"template":{"provider":"p","port":70000},"replicas":1}`, fields: want("template.port")},
	{name: "template port string", doc: `{"template":{"provider":"p","port":"1"},"replicas":1}`, fields: want("template.port")},
	{name: "template auth lease", doc: `{"template":{"provider":"p","auth":{"mode":"lease"}},"replicas":3}`},
	{name: "template auth lease with password", doc: `{"template":{"provider":"p","auth":{"mode":"lease","password":"x"}},"replicas":1}`,
		fields: want("template.auth.password")},
	{name: "template auth password empty", doc: `{"template":{"provider":"p","auth":{"username":"u","password":""}},"replicas":1}`,
		fields: want("template.auth.password")},
	{name: "template health timeout above interval", doc: `{"template":{"provider":"p","healthCheck":{"intervalSeconds":5,"timeoutSeconds":6}},"replicas":1}`,
		fields: want("template.healthCheck.timeoutSeconds"), schemaGap: true},
	{name: "template several problems", doc: `{"template":{"provider":"A","port":70000,"drain":true},"replicas":1}`,
		fields: want("template.port", "template.provider", "template.drain")},
	{name: "template version 2", doc: `{"template":{"v":2,"provider":"p"},"replicas":1}`, fields: want("template.v")},
	{name: "template version 2 with new fields", doc: `{"template":{"v":2,"provider":"p","shiny":true},"replicas":1}`, fields: want("template.v")},
	{name: "template version 0", doc: `{"template":{"v":0,"provider":"p"},"replicas":1}`, fields: want("template.v")},
	{name: "template string", doc: `{"template":"p","replicas":1}`, fields: want("template")},

	// Replicas.
	{name: "replicas missing", doc: `{` + tmpl + `}`, fields: want("replicas")},
	{name: "autoscale", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3}}`},
	{name: "autoscale full", doc: `{` + tmpl + `,"autoscale":{"min":1,"max":10,"scaleDownAfterSeconds":60,"targetUtilization":0.5,"scaleDownStep":2},"rotation":{"minAvailable":10}}`},
	{name: "autoscale target 1", doc: `{` + tmpl + `,"autoscale":{"min":2,"max":2,"targetUtilization":1}}`},
	{name: "autoscale and replicas", doc: `{` + tmpl + `,"replicas":3,"autoscale":{"min":0,"max":3}}`, fields: want("replicas")},
	{name: "autoscale without min", doc: `{` + tmpl + `,"autoscale":{"max":3}}`, fields: want("autoscale.min")},
	{name: "autoscale without max", doc: `{` + tmpl + `,"autoscale":{"min":0}}`, fields: want("autoscale.max")},
	{name: "autoscale empty", doc: `{` + tmpl + `,"autoscale":{}}`, fields: want("autoscale.min", "autoscale.max")},
	{name: "autoscale null", doc: `{` + tmpl + `,"autoscale":null}`, fields: want("autoscale", "replicas")},
	{name: "autoscale max zero", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":0}}`, fields: want("autoscale.max")},
	{name: "autoscale max below min", doc: `{` + tmpl + `,"autoscale":{"min":4,"max":3}}`, fields: want("autoscale.max"), schemaGap: true},
	{name: "autoscale min negative", doc: `{` + tmpl + `,"autoscale":{"min":-1,"max":3}}`, fields: want("autoscale.min")},
	{name: "autoscale max too big", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":1001}}`, fields: want("autoscale.max")},
	{name: "autoscale target above 1", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"targetUtilization":1.5}}`, fields: want("autoscale.targetUtilization")},
	{name: "autoscale target negative", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"targetUtilization":-0.5}}`, fields: want("autoscale.targetUtilization")},
	{name: "autoscale target string", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"targetUtilization":"high"}}`, fields: want("autoscale.targetUtilization")},
	{name: "autoscale delay too long", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"scaleDownAfterSeconds":86401}}`, fields: want("autoscale.scaleDownAfterSeconds")},
	{name: "autoscale delay negative", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"scaleDownAfterSeconds":-1}}`, fields: want("autoscale.scaleDownAfterSeconds")},
	{name: "autoscale step negative", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"scaleDownStep":-1}}`, fields: want("autoscale.scaleDownStep")},
	{name: "autoscale step fraction", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"scaleDownStep":1.5}}`, fields: want("autoscale.scaleDownStep")},
	{name: "autoscale unknown field", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"warmup":2}}`, fields: want("autoscale.warmup")},
	{name: "autoscale spares count", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":2}}`},
	{name: "autoscale spares zero", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":0}}`},
	{name: "autoscale spares auto", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":"auto"}}`},
	{name: "autoscale spares auto with wait target", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":"auto","waitTargetSeconds":5}}`},
	{name: "autoscale spares word", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":"many"}}`, fields: want("autoscale.spares")},
	{name: "autoscale spares Auto", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":"Auto"}}`, fields: want("autoscale.spares")},
	{name: "autoscale spares negative", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":-1}}`, fields: want("autoscale.spares")},
	{name: "autoscale spares fraction", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":1.5}}`, fields: want("autoscale.spares")},
	{name: "autoscale spares too many", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":1001}}`, fields: want("autoscale.spares")},
	{name: "autoscale spares object", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":{"n":1}}}`, fields: want("autoscale.spares")},
	{name: "autoscale spares bool", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":true}}`, fields: want("autoscale.spares")},
	{name: "autoscale spares null", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":null}}`, fields: want("autoscale.spares")},
	{name: "autoscale wait target without auto", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":2,"waitTargetSeconds":5}}`, fields: want("autoscale.waitTargetSeconds"), schemaGap: true},
	{name: "autoscale wait target negative", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":"auto","waitTargetSeconds":-1}}`, fields: want("autoscale.waitTargetSeconds")},
	{name: "autoscale wait target too long", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3,"spares":"auto","waitTargetSeconds":3601}}`, fields: want("autoscale.waitTargetSeconds")},
	{name: "autoscale minAvailable above max", doc: `{` + tmpl + `,"autoscale":{"min":0,"max":3},"rotation":{"minAvailable":4}}`, fields: want("rotation.minAvailable"), schemaGap: true},
	{name: "replicas negative", doc: `{` + tmpl + `,"replicas":-1}`, fields: want("replicas")},
	{name: "replicas too big", doc: `{` + tmpl + `,"replicas":1001}`, fields: want("replicas")},
	{name: "replicas huge", doc: `{` + tmpl + `,"replicas":99999999999999999999}`, fields: want("replicas")},
	{name: "replicas string", doc: `{` + tmpl + `,"replicas":"3"}`, fields: want("replicas")},
	{name: "replicas fraction", doc: `{` + tmpl + `,"replicas":1.5}`, fields: want("replicas")},
	{name: "replicas written as float", doc: `{` + tmpl + `,"replicas":3.0}`, fields: want("replicas"), schemaGap: true},
	{name: "replicas null", doc: `{` + tmpl + `,"replicas":null}`, fields: want("replicas")},
	{name: "invalid replicas alone", doc: `{` + tmpl + `,"replicas":-5,"rotation":{"minAvailable":2}}`, fields: want("replicas")},

	// Placements.
	{name: "placement provider invalid", doc: pool(`"placements":[{},{"provider":"B"}]`), fields: want("placements[1].provider")},
	{name: "placement provider number", doc: pool(`"placements":[{},{"provider":5}]`), fields: want("placements[1].provider")},
	{name: "placement zone number", doc: pool(`"placements":[{"zone":"a"},{"zone":"b"},{"zone":7}]`), fields: want("placements[2].zone")},
	{name: "placement string", doc: pool(`"placements":["x"]`), fields: want("placements[0]")},
	{name: "placements object", doc: pool(`"placements":{}`), fields: want("placements")},
	{name: "placements null", doc: pool(`"placements":null`), fields: want("placements")},
	{name: "placement null", doc: pool(`"placements":[{},null]`), fields: want("placements[1]")},
	{name: "placement zone null", doc: pool(`"placements":[{},{"zone":null}]`), fields: want("placements[1].zone")},
	{name: "placement unknown field", doc: pool(`"placements":[{},{"zne":"a"}]`), fields: want("placements[1].zne")},
	{name: "placement miscased field", doc: pool(`"placements":[{"Zone":"a"}]`), fields: want("placements[0].Zone")},
	{name: "placement repeated key", doc: pool(`"placements":[{"zone":"a","zone":"b"}]`), fields: want("placements[0].zone"), schemaGap: true},
	{name: "placements repeated", doc: pool(`"placements":[{"zone":"a"},{"zone":"b"},{"zone":"a"},{"zone":"b"}]`),
		fields: want("placements[2]", "placements[3]")},
	{name: "placements repeated once filled", doc: `{"template":{"provider":"p","placement":{"zone":"a"}},"replicas":1,"placements":[{},{"zone":"a"}]}`,
		fields: want("placements[1]"), schemaGap: true},
	{name: "placements repeat the template's provider", doc: pool(`"placements":[{"provider":"p"},{}]`),
		fields: want("placements[1]"), schemaGap: true},
	{name: "too many placements", doc: pool(manyPlacements(101)), fields: want("placements")},

	// Spread.
	{name: "spread unknown", doc: pool(`"spread":"random"`), fields: want("spread")},
	{name: "spread wrong case", doc: pool(`"spread":"Round-Robin"`), fields: want("spread")},
	{name: "spread number", doc: pool(`"spread":1`), fields: want("spread")},

	// Rotation.
	{name: "maxAge negative", doc: pool(`"rotation":{"maxAgeSeconds":-1}`), fields: want("rotation.maxAgeSeconds")},
	{name: "maxAge below a minute", doc: pool(`"rotation":{"maxAgeSeconds":59}`), fields: want("rotation.maxAgeSeconds")},
	{name: "maxAge above a year", doc: pool(`"rotation":{"maxAgeSeconds":31536001}`), fields: want("rotation.maxAgeSeconds")},
	{name: "maxAge overflowing a duration", doc: pool(`"rotation":{"maxAgeSeconds":9223372036854775807}`), fields: want("rotation.maxAgeSeconds")},
	{name: "bad maxAge alone", doc: pool(`"rotation":{"maxAgeSeconds":30,"jitterSeconds":40}`), fields: want("rotation.maxAgeSeconds")},
	{name: "jitter negative", doc: pool(`"rotation":{"maxAgeSeconds":3600,"jitterSeconds":-1}`), fields: want("rotation.jitterSeconds")},
	{name: "jitter too big", doc: pool(`"rotation":{"maxAgeSeconds":3600,"jitterSeconds":31536001}`), fields: want("rotation.jitterSeconds")},
	{name: "jitter at maxAge", doc: pool(`"rotation":{"maxAgeSeconds":3600,"jitterSeconds":3600}`),
		fields: want("rotation.jitterSeconds"), schemaGap: true},
	{name: "jitter without maxAge", doc: pool(`"rotation":{"jitterSeconds":10}`), fields: want("rotation.jitterSeconds"), schemaGap: true},
	{name: "maxSurge negative", doc: pool(`"rotation":{"maxSurge":-1}`), fields: want("rotation.maxSurge")},
	{name: "maxSurge too big", doc: pool(`"rotation":{"maxSurge":1001}`), fields: want("rotation.maxSurge")},
	{name: "minAvailable negative", doc: pool(`"rotation":{"minAvailable":-1}`), fields: want("rotation.minAvailable")},
	{name: "minAvailable above replicas", doc: pool(`"rotation":{"minAvailable":4}`), fields: want("rotation.minAvailable"), schemaGap: true},
	{name: "minAvailable too big", doc: pool(`"rotation":{"minAvailable":1001}`), fields: want("rotation.minAvailable")},
	{name: "minAvailable replicas without surge", doc: pool(`"rotation":{"maxSurge":0,"minAvailable":3}`),
		fields: want("rotation.minAvailable"), schemaGap: true},
	{name: "drainTimeout negative", doc: pool(`"rotation":{"drainTimeoutSeconds":-1}`), fields: want("rotation.drainTimeoutSeconds")},
	{name: "drainTimeout above a day", doc: pool(`"rotation":{"drainTimeoutSeconds":86401}`), fields: want("rotation.drainTimeoutSeconds")},
	{name: "rotation unknown field", doc: pool(`"rotation":{"maxage":3600}`), fields: want("rotation.maxage")},
	{name: "rotation null", doc: pool(`"rotation":null`), fields: want("rotation")},
	{name: "maxSurge null", doc: pool(`"rotation":{"maxSurge":null}`), fields: want("rotation.maxSurge")},
	{name: "rotation array", doc: pool(`"rotation":[]`), fields: want("rotation")},

	// Recycle.
	{name: "recycle empty", doc: pool(`"recycle":{}`), fields: want("recycle.blockedTargets")},
	{name: "blockedTargets zero", doc: pool(`"recycle":{"blockedTargets":0}`), fields: want("recycle.blockedTargets")},
	{name: "blockedTargets too big", doc: pool(`"recycle":{"blockedTargets":1001}`), fields: want("recycle.blockedTargets")},
	{name: "window negative", doc: pool(`"recycle":{"blockedTargets":3,"windowSeconds":-1}`), fields: want("recycle.windowSeconds")},
	{name: "window below a minute", doc: pool(`"recycle":{"blockedTargets":3,"windowSeconds":59}`), fields: want("recycle.windowSeconds")},
	{name: "window above a week", doc: pool(`"recycle":{"blockedTargets":3,"windowSeconds":604801}`), fields: want("recycle.windowSeconds")},
	{name: "recycle null", doc: pool(`"recycle":null`), fields: want("recycle")},
	{name: "recycle unknown field", doc: pool(`"recycle":{"blockedTargets":3,"targets":3}`), fields: want("recycle.targets")},
	{name: "quarantine defaults", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{}}`)},
	{name: "quarantine off", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"seconds":0}}`)},
	{name: "quarantine at its bounds", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"seconds":60,"ipv4Prefix":8,"ipv6Prefix":32,"maxReplacements":0}}`)},
	{name: "quarantine at its upper bounds", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"seconds":2592000,"ipv4Prefix":32,"ipv6Prefix":128,"maxReplacements":10}}`)},
	{name: "quarantine below a minute", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"seconds":59}}`), fields: want("recycle.quarantine.seconds")},
	{name: "quarantine above 30 days", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"seconds":2592001}}`), fields: want("recycle.quarantine.seconds")},
	{name: "quarantine negative", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"seconds":-1}}`), fields: want("recycle.quarantine.seconds")},
	{name: "quarantine ipv4 too wide", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"ipv4Prefix":7}}`), fields: want("recycle.quarantine.ipv4Prefix")},
	{name: "quarantine ipv4 too long", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"ipv4Prefix":33}}`), fields: want("recycle.quarantine.ipv4Prefix")},
	{name: "quarantine ipv6 too wide", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"ipv6Prefix":31}}`), fields: want("recycle.quarantine.ipv6Prefix")},
	{name: "quarantine ipv6 too long", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"ipv6Prefix":129}}`), fields: want("recycle.quarantine.ipv6Prefix")},
	{name: "quarantine replacements negative", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"maxReplacements":-1}}`), fields: want("recycle.quarantine.maxReplacements")},
	{name: "quarantine replacements too many", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"maxReplacements":11}}`), fields: want("recycle.quarantine.maxReplacements")},
	{name: "quarantine unknown field", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":{"days":1}}`), fields: want("recycle.quarantine.days")},
	{name: "quarantine null", doc: pool(`"recycle":{"blockedTargets":3,"quarantine":null}`), fields: want("recycle.quarantine")},

	// Leases.
	{name: "holder cap", doc: pool(`"leases":{"maxPerHolder":2}`)},
	{name: "holder cap lifted", doc: pool(`"leases":{"maxPerHolder":0}`)},
	{name: "holder cap at its limit", doc: pool(`"leases":{"maxPerHolder":10000}`)},
	{name: "empty leases", doc: pool(`"leases":{}`)},
	{name: "holder cap negative", doc: pool(`"leases":{"maxPerHolder":-1}`), fields: want("leases.maxPerHolder")},
	{name: "holder cap too big", doc: pool(`"leases":{"maxPerHolder":10001}`), fields: want("leases.maxPerHolder")},
	{name: "holder cap a string", doc: pool(`"leases":{"maxPerHolder":"2"}`), fields: want("leases.maxPerHolder")},
	{name: "leases unknown field", doc: pool(`"leases":{"maxLeases":2}`), fields: want("leases.maxLeases")},
	{name: "leases null", doc: pool(`"leases":null`), fields: want("leases")},

	// Unknown, miscased, null and repeated keys, with their paths.
	{name: "unknown top level", doc: pool(`"replica":3`), fields: want("replica")},
	{name: "miscased top level", doc: `{` + tmpl + `,"Replicas":3}`, fields: want("Replicas")},
	{name: "unknown in template", doc: `{"template":{"provider":"p","placment":{"zone":"a"}},"replicas":1}`, fields: want("template.placment")},
	{name: "miscased in template", doc: `{"template":{"Provider":"p"},"replicas":1}`, fields: want("template.Provider")},
	{name: "unknown deep in template", doc: `{"template":{"provider":"p","healthCheck":{"interval":3}},"replicas":1}`,
		fields: want("template.healthCheck.interval")},
	{name: "unknown before a type error", doc: `{"foo":1,"replicas":"x"}`, fields: want("foo", "replicas")},

	// Every problem at once: the keys, then what validation finds in the rest.
	{name: "typo and invalid template", doc: `{"template":{"provider":"p","port":0,"maxLeases":-1},"replcias":3}`,
		fields: want("replcias", "template.maxLeases", "replicas")},
	{name: "null template and a bad spread", doc: `{"template":null,"replicas":1,"spread":"x"}`, fields: want("template", "spread")},
	{name: "null template", doc: `{"template":null,"replicas":1}`, fields: want("template")},
	{name: "null in template", doc: `{"template":{"provider":"p","port":null},"replicas":1}`, fields: want("template.port")},
	{name: "repeated replicas", doc: `{` + tmpl + `,"replicas":1,"replicas":2}`, fields: want("replicas"), schemaGap: true},
	{name: "repeated key in template", doc: `{"template":{"provider":"p","provider":"q"},"replicas":1}`,
		fields: want("template.provider"), schemaGap: true},

	// Version.
	{name: "version 2", doc: `{"v":2,` + tmpl + `,"replicas":1}`, fields: want("v")},
	{name: "version 2 with new fields", doc: `{"v":2,` + tmpl + `,"replicas":1,"autoscale":{}}`, fields: want("v")},
	{name: "version 0", doc: `{"v":0,` + tmpl + `,"replicas":1}`, fields: want("v")},
	{name: "version string", doc: `{"v":"1",` + tmpl + `,"replicas":1}`, fields: want("v")},

	// Several problems are all reported, in a stable order.
	{name: "several problems", doc: `{"template":{"provider":"p","pool":"x"},"replicas":2000,"placements":[{"provider":"-"}],
		"spread":"x","rotation":{"maxAgeSeconds":1,"maxSurge":-1,"drainTimeoutSeconds":-1},"recycle":{"blockedTargets":0,"windowSeconds":1}}`,
		fields: want("template.pool", "replicas", "placements[0].provider", "spread", "rotation.maxAgeSeconds", "rotation.maxSurge",
			"rotation.drainTimeoutSeconds", "recycle.blockedTargets", "recycle.windowSeconds")},
}
