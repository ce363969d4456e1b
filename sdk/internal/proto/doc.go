// Package proto holds the protobuf definitions of the plugin protocol and the Go code generated from them.
// The generated code is committed; `go generate ./...` reproduces it byte for byte (CI checks).
package proto

//go:generate ./generate.sh
