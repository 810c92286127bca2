// Package pyfmt writes numbers and strings exactly as Python does, for the
// places where cpmla must produce Python's bytes: chat templates (Jinja's
// tojson is Python's json.dumps) and tool-call arguments (vLLM writes them
// with json.dumps). It must never depend on anything outside the standard
// library.
package pyfmt
