// The franz-go version `make conformance` runs the kgo integration tests of: a module of
// seglog's own that only requires it, so `go test -c` of franz-go's pkg/kgo builds from the
// Go module proxy; nothing of franz-go is kept in the repository.
module seglog.local/conformance

go 1.26.0

require github.com/twmb/franz-go v1.22.3
