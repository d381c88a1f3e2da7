// Package gcptest is a stateful Compute Engine API simulator on net/http/httptest that the
// real SDK client (cloud.google.com/go/compute/apiv1, REST transport) talks to, pointed at it
// with option.WithEndpoint(srv.URL()) and option.WithoutAuthentication().
//
// No Compute emulator exists and no real Compute API is reachable from CI, so the gcp
// provider is proven against this: it speaks the REST shapes of the public reference, holds
// state like the service, moves instances and operations asynchronously, and runs every
// RUNNING instance as a real forward proxy (Options.Serve: egressd's forwardproxy.Serve) on its own loopback address, reported as
// the instance's natIP (and networkIP). With Options.Boot the instance's own metadata says how
// its proxy runs, as a real image's startup reads it: EgressdImage reads the egressd-proxy
// item the gcp provider writes (port and auth line). With Options.Auth the API requires a
// bearer token, issued by the OAuth token endpoint (TokenPath) for a JWT signed with a
// service-account key (ServiceAccount writes such a key file).
//
// Shapes and where they come from (the public API reference):
//   - instances insert/get/delete/aggregatedList:
//     https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert
//     https://cloud.google.com/compute/docs/reference/rest/v1/instances/get
//     https://cloud.google.com/compute/docs/reference/rest/v1/instances/delete
//     https://cloud.google.com/compute/docs/reference/rest/v1/instances/aggregatedList
//   - instance states (PROVISIONING, STAGING, RUNNING, STOPPING, TERMINATED):
//     https://cloud.google.com/compute/docs/instances/instance-life-cycle
//   - zone operations get/wait/list/delete (list filters on targetLink, operationType, status) and the
//     Operation resource (status, error.errors[], httpErrorStatusCode):
//     https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/get
//     https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/wait
//     https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/list
//     https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/delete
//     https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations
//   - firewalls get/insert/list/delete and global operations:
//     https://cloud.google.com/compute/docs/reference/rest/v1/firewalls
//     https://cloud.google.com/compute/docs/reference/rest/v1/globalOperations/get
//   - the error body {"error":{"code","message","errors":[{"message","domain","reason"}]}}:
//     https://cloud.google.com/compute/docs/api/handle-api-errors
//   - the filter syntax (labels.KEY = "VALUE", AND):
//     https://cloud.google.com/compute/docs/reference/rest/v1/instances/aggregatedList#query-parameters
//   - async failure codes QUOTA_EXCEEDED and ZONE_RESOURCE_POOL_EXHAUSTED:
//     https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability
//     and real reports: CCExtractor/sample-platform#901, kubernetes/kubernetes#87003 (quota),
//     scylla-cluster-tests#12477 (stockout)
//   - the service-account token exchange (jwt-bearer grant, RS256 assertion) and the 401 body:
//     https://developers.google.com/identity/protocols/oauth2/service-account#httprest
//   - Spot preemption (instanceTerminationAction STOP or DELETE):
//     https://cloud.google.com/compute/docs/instances/spot
//
// The JSON is written with protojson from the SDK's own computepb messages, so field names
// (natIP, networkIP, httpErrorStatusCode, ...) are the ones the client decodes.
//
// Not modelled: IAM (any valid token may do anything), other credential types, pagination
// (one page holds everything; maxResults and pageToken are ignored), instances list
// (non-aggregated), start/stop/reset, regions and region operations, filters other than label
// equality (instances) and targetLink/operationType/status equality (zone operations) joined
// by AND, firewalls list filters, operations ageing out, disks and images as resources
// (sourceImage is accepted as given), firewall rules actually filtering traffic, and whether
// the real service fails a non-partial aggregatedList with a zone down (here it answers, with
// the zone's UNREACHABLE warning).
package gcptest
