package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"
)

// authorized reports whether r may proceed: every route is open without an
// API key; with one, every /v1 route needs "Authorization: Bearer KEY"
// (vLLM guards the same routes). The comparison is of SHA-256 digests in
// constant time, so neither the key nor its length leaks through timing.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.APIKey == "" || !strings.HasPrefix(r.URL.Path, "/v1") || r.Method == http.MethodOptions {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(s.cfg.APIKey))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// CORS is a cross-origin policy with vLLM's flags (--allowed-origins,
// --allowed-methods, --allowed-headers, --allow-credentials); "*" allows
// any. The zero value allows no cross-origin request (no headers are sent).
type CORS struct {
	Origins, Methods, Headers []string
	Credentials               bool
}

func allows(list []string, v string, fold bool) bool {
	for _, x := range list {
		if x == "*" || x == v || (fold && strings.EqualFold(x, v)) {
			return true
		}
	}
	return false
}

// handle adds the CORS headers to a request that carries an Origin and
// answers preflight requests; it reports whether the request was answered.
func (c CORS) handle(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || len(c.Origins) == 0 {
		return false
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	allowOrigin := origin
	if slices.Contains(c.Origins, "*") && !c.Credentials {
		allowOrigin = "*"
	}
	preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
	if !allows(c.Origins, origin, false) {
		if preflight {
			http.Error(w, "Disallowed CORS origin", http.StatusBadRequest)
			return true
		}
		return false
	}
	h.Set("Access-Control-Allow-Origin", allowOrigin)
	if c.Credentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	if !preflight {
		return false
	}
	method := r.Header.Get("Access-Control-Request-Method")
	if !allows(c.Methods, method, false) {
		http.Error(w, "Disallowed CORS method", http.StatusBadRequest)
		return true
	}
	for _, hd := range strings.Split(r.Header.Get("Access-Control-Request-Headers"), ",") {
		if hd = strings.TrimSpace(hd); hd != "" && !allows(c.Headers, hd, true) {
			http.Error(w, "Disallowed CORS headers", http.StatusBadRequest)
			return true
		}
	}
	methods := strings.Join(c.Methods, ", ")
	if slices.Contains(c.Methods, "*") {
		methods = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
	}
	h.Set("Access-Control-Allow-Methods", methods)
	if hs := r.Header.Get("Access-Control-Request-Headers"); hs != "" {
		h.Set("Access-Control-Allow-Headers", hs)
	}
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusOK)
	return true
}
