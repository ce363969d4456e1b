#!/usr/bin/env bash
# Regenerates the Go code for the plugin protocol. Run through `go generate ./...`.
# protoc comes from the system (Debian: protobuf-compiler); the Go plugins are built at the versions go.mod pins,
# so the output is byte for byte reproducible on any machine with the same protoc.
set -euo pipefail
cd "$(dirname "$0")"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc
for dir in enginev1 routerv1; do
  protoc -I . \
    --plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
    --go_out=paths=source_relative:. --go-grpc_out=paths=source_relative:. \
    "$dir"/*.proto
done
