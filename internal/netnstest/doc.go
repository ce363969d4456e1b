// Package netnstest builds, for one test, a small network of Linux network namespaces: machines 1..n, each a
// namespace of its own whose eth0 (one end of a veth pair, at <subnet>.i/24) is cabled to a bridge in one more
// namespace, where the test itself sits at <subnet>.254, as machines on a switch. Nothing touches the host's
// own network. A test runs a process on machine i under "ip netns exec" (Net.Exec), reaches it from the
// bridge's namespace or from the machine's own (DialContext, for an http.Transport), and pulls or plugs a
// machine's cable (Net.SetLink).
//
// It needs root and iproute2. Where they are missing the test skips, unless the environment variable the
// test names (Config.RequireEnv) is 1, and then it fails. Namespaces are named after the test process's id
// and removed when the test ends; those of processes that no longer run (a killed test) are swept first.
//
// The end-to-end tests of the gateway (gateway/e2e/netns_linux_test.go) and of serfcluster
// (serfcluster/netns_linux_test.go) use it.
package netnstest
