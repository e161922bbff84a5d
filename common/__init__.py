"""The ground floor every package builds on: the library code the apps and the wiring share
(REST errors, parsers and pagination, request limits and memo, origin and security headers,
log filters, static finders, environment parsing, redaction). It imports no app and not the
`dashboard` settings package: arrows point down into it, never back up."""
