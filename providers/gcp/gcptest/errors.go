package gcptest

import (
	"encoding/json"
	"net/http"
)

// apiError is a googleapi error body, as in
// https://cloud.google.com/compute/docs/api/handle-api-errors:
//
//	{"error":{"code":N,"message":M,"errors":[{"message":M,"domain":"global","reason":R}]}}
//
// A 429 also carries "status":"RESOURCE_EXHAUSTED" (the google.rpc.Code name).
type apiError struct {
	code    int
	reason  string
	message string
	status  string
}

type errorItem struct {
	Message string `json:"message"`
	Domain  string `json:"domain"`
	Reason  string `json:"reason"`
}

type errorBody struct {
	Error struct {
		Code    int         `json:"code"`
		Message string      `json:"message"`
		Errors  []errorItem `json:"errors"`
		Status  string      `json:"status,omitempty"`
	} `json:"error"`
}

// Reasons used by the simulator (googleapi Errors[0].Reason).
const (
	ReasonNotFound          = "notFound"
	ReasonAlreadyExists     = "alreadyExists"
	ReasonQuotaExceeded     = "quotaExceeded"
	ReasonRateLimitExceeded = "rateLimitExceeded"
	ReasonInvalid           = "invalid"
	ReasonBackendError      = "backendError"
	ReasonAuthError         = "authError"
)

// Operation error codes (Operation.error.errors[].code) used by the simulator.
const (
	CodeQuotaExceeded             = "QUOTA_EXCEEDED"
	CodeZoneResourcePoolExhausted = "ZONE_RESOURCE_POOL_EXHAUSTED"
	CodeInternalError             = "INTERNAL_ERROR"
	unreachableWarning            = "UNREACHABLE"
	noResultsWarning              = "NO_RESULTS_ON_PAGE"
	partialSuccessWarning         = "PARTIAL_SUCCESS"
	statusResourceExhausted       = "RESOURCE_EXHAUSTED"
	stockoutMessageFormat         = "The zone '%s' does not have enough resources available to fulfill the request.  Try a different zone, or try again later."
	quotaMessageCPUs              = "Quota 'CPUS' exceeded.  Limit: 24.0 in region %s."
	quotaMessageAddresses         = "Quota 'IN_USE_ADDRESSES' exceeded.  Limit: %d.0 in region %s."
	rateLimitMessage              = "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service 'compute.googleapis.com'."
)

func writeError(w http.ResponseWriter, e apiError) {
	var b errorBody
	b.Error.Code = e.code
	b.Error.Message = e.message
	b.Error.Errors = []errorItem{{Message: e.message, Domain: "global", Reason: e.reason}}
	b.Error.Status = e.status
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(e.code)
	_ = json.NewEncoder(w).Encode(b)
}

func notFound(resource string) apiError {
	return apiError{code: http.StatusNotFound, reason: ReasonNotFound,
		message: "The resource '" + resource + "' was not found"}
}

func alreadyExists(resource string) apiError {
	return apiError{code: http.StatusConflict, reason: ReasonAlreadyExists,
		message: "The resource '" + resource + "' already exists"}
}

func invalid(message string) apiError {
	return apiError{code: http.StatusBadRequest, reason: ReasonInvalid, message: message}
}
