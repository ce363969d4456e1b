// Package link scores prefill instances by the network path their KV cache takes to the decode instance: the
// KV of an 8k-token prompt of an 8B model is about 1 GiB, so Thunderbolt against Wi-Fi is seconds of time to
// first token. (The scorer is named for the network link; it has nothing to do with instance links.)
//
// Formula, for a prefill instance on node P and the decode instance on node D:
//
//	same node                        → 1
//	no path P→D (nor D→P)            → 0
//	path                             → clamp(Quality, 0, 1); Quality 0 (unknown) and NaN score 0
//
// Quality is the cluster's own score of the path: serfcluster computes it from the path's kind, speed and RTT
// (and the gateway copies it into router.Path), so the scorer keeps no formula or speed table of its own. The
// path from P to D is the one the KV travels; when only D→P is known it stands in.
package link
