// Package netif finds this machine's network addresses and what kind of link each one sits on.
//
// P/D disaggregation moves gigabytes of KV cache between machines, so which address of a peer to use matters:
// a Thunderbolt bridge beats 10 GbE, which beats Wi-Fi. serfcluster advertises the addresses Detect returns
// and picks, for every pair of nodes, the best-matching pair of addresses.
//
// The kind and speed come from what the OS says. On Linux that is sysfs: /sys/class/net/<if>/type (loopback),
// the wireless and phy80211 entries (Wi-Fi), the device's driver (thunderbolt-net), whether the interface has
// a device at all (a physical NIC versus a veth, bridge or tunnel), and /sys/class/net/<if>/speed in Mbps. On
// macOS it is `networksetup -listallhardwareports` (which device is "Wi-Fi", "Thunderbolt Bridge", an
// "Ethernet" port) and the media line of `ifconfig` for the speed, with name heuristics when those fail.
// Elsewhere only name heuristics apply. Unknown speeds are 0.
//
// The parsers are plain functions over text or an fs.FS, so they are tested on every OS with canned input.
package netif
