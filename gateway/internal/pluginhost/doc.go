// Package pluginhost runs the gateway's plugins as hashicorp/go-plugin subprocesses and keeps them running.
//
// A Supervisor starts one plugin (a built-in one by re-executing the duet binary itself, so `go run ./gateway`
// needs no separate build, or an external one by path), waits until it is ready, keeps the tail of its stderr
// so a crash reads as a useful error, restarts it with exponential backoff when it dies, and stops it on
// shutdown. go-plugin does not restart a crashed plugin: each restart builds a new client. A request in flight
// on a plugin that dies fails fast, because its gRPC stream breaks with the process; Explain turns that error
// into one that says what happened, with the plugin's last words.
package pluginhost
