// Package endpoint turns a prefill instance's KV endpoint into the address its decode instance should dial.
//
// An engine advertises its KV wire server as host:port, where the host is whatever it bound or guessed (often
// an unspecified address such as 0.0.0.0, or one interface of several). The cluster's paths between nodes
// know better which address of the prefill node the decode node reaches best (Thunderbolt before Ethernet
// before Wi-Fi, as exo's find_ip_prioritised), so across nodes that host wins and the endpoint keeps only its
// port.
package endpoint
