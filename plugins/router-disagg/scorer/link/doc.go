// Package link scores prefill instances by the path their KV cache takes to the decode instance: the KV of an
// 8k-token prompt of an 8B model is about 1 GiB, so Thunderbolt against Wi-Fi is seconds of time to first
// token.
//
// Formula, for a prefill instance on node P and the decode instance on node D:
//
//	same node                         → 1
//	no link P→D (nor D→P)             → 0
//	link with Quality > 0             → clamp(Quality, 0, 1)
//	link with Quality 0 (not scored)  → 0.7·bw + 0.3·lat, where
//	    bw  = clamp(log10(Mb/s) / 5, 0, 1)  (100 Gb/s → 1, 10 Gb/s → 0.8, 1 Gb/s → 0.6), Mb/s from
//	          SpeedMbps, or the kind's nominal speed when unknown (thunderbolt 40000, ethernet 1000, wifi 400,
//	          loopback 100000, other 100)
//	    lat = 1 / (1 + RTT in ms), or 0.5 when RTT is unknown (0)
//
// Quality is the cluster's own score of the path (serfcluster computes it with the same fallback formula), so
// the fallback only matters for snapshots built without it. The link from P to D is the one the KV travels;
// when only D→P is known it stands in.
package link
